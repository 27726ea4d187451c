"""Model Explorer extension for torchlens-explore traces (Model Explorer imports its `main` module).

    model-explorer --extensions=app.model_explorer_extension path/to/model.trace.zip
"""
