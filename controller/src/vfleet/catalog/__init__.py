"""What vfleet knows before it plans: models, GPUs, vLLM releases and their flags."""
