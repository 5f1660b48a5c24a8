"""uncurated: contrastive representation learning from uncurated data.

``uncurated.load_model(run)`` loads a trained run's encoders for inference (:mod:`uncurated.train.encoders`),
imported on first use so that ``import uncurated`` stays light.
"""

from typing import TYPE_CHECKING

from .lazy import lazy_exports
from .versions import warn_untested

if TYPE_CHECKING:
    from .train.encoders import Encoders, load_model

__version__ = "0.1.0"  # the one place the version is defined: pyproject.toml reads it; CHANGELOG.md lists releases

__getattr__, __dir__ = lazy_exports(__name__, {"Encoders": ".train.encoders", "load_model": ".train.encoders"})

__all__ = ["Encoders", "__version__", "load_model"]

warn_untested()  # torch or triton outside the tested releases: one warning, naming them
