"""uncurated: contrastive representation learning from uncurated data."""

from .versions import warn_untested

__version__ = "0.1.0"  # the one place the version is defined: pyproject.toml reads it; CHANGELOG.md lists releases

warn_untested()  # torch or triton outside the tested releases: one warning, naming them
