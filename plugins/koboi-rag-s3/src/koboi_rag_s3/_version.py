"""The version of koboi-rag-s3: written here and nowhere else (hatchling reads it)."""

__version__ = "0.1.0"
