"""uncurated: contrastive representation learning from uncurated data."""

__version__ = "0.1.0"
