"""Exports: TF-Hub feature modules and detection SavedModels for serving."""
