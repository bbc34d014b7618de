"""The engine through its public API, on every store: steps, retries and their errors."""
