"""The torchlens-explore Panel app and its command line."""
