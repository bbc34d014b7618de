"""One pass and one attempt: replay, the step state machine, and the seam to the process
that runs them (``host``). Nothing here knows the Engine or the Worker."""
