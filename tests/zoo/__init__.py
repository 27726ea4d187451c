"""The model-zoo sweep: transformers architectures and torch.nn layers through every tracer column."""
