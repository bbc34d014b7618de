"""plait's integrations with other libraries, one module each, each behind its extra
(``plait.integrations.pydantic_ai``: ``pip install 'plait[pydantic-ai]'``). Importing
this package imports none of them."""
