"""The PyTorch feature sweep: one small real case per feature, every column classified (docs/torch-features.md)."""
