"""uncurated: contrastive representation learning from uncurated data."""

__version__ = "0.1.0"  # the one place the version is defined: pyproject.toml reads it; CHANGELOG.md lists releases
