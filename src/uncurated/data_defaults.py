"""The choices of the data modules, in a module that imports nothing.

The data modules take them from here, and so does the training configuration, which checks its keys against them
when it is loaded (``uncurated COMMAND --help`` reads it without loading torch): each list lives here once.
"""

from __future__ import annotations

#: The image modes a dataset can produce: one gray channel or three colour channels (data/decode.py).
IMAGE_MODES = ("L", "RGB")

#: How an image reaches its size (data/decode.py): ``stretch`` resizes it to exactly that, the aspect ratio not
#: kept; ``crop`` resizes its shorter side to fit and keeps the centre (the image processors of CLIP, ViT, ResNet).
RESIZES = ("stretch", "crop")

#: How shards are read (data/webdataset.py): the library's strict tarfile reader, or the webdataset library's
#: iterator.
SHARD_READERS = ("tarfile", "webdataset")

#: How FashionCaptions mismatches a pair (data/captions.py): any other caption, or one of a confusable class.
MISMATCH_MODES = ("uniform", "confusable")

#: The augmentation presets, by name (their strengths: ``PRESETS`` in data/augment.py, in this order).
AUGMENTATIONS = ("fashion-mnist", "digits", "crop", "simclr", "fashion-clutter", "none")
