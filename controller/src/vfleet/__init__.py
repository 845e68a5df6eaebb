"""vfleet: turn a GPU cluster and a model into a vLLM deployment that is computed, not guessed."""

__version__ = "0.1.0"
