"""Integrations with other libraries (transformers, ...), imported lazily by who needs them."""
