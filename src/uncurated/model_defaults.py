"""The default sizes and choices of the models and of WPSE, in a module that imports nothing.

The model modules take their defaults from here (``resnet.DEFAULT_WIDTHS`` is :data:`RESNET_WIDTHS`), and so
does the training configuration, which ``uncurated COMMAND --help`` reads without loading torch: each default
lives here once, and the command line starts at once.
"""

from __future__ import annotations

# The encoders (models/factory.py and the training configuration).
#: The encoders are registered by name (uncurated.train.image_encoders, uncurated.train.text_encoders); beside them,
#: an image or text encoder may be ``hf:SOURCE`` (a Hugging Face architecture or folder) or
#: ``python:module:function`` (a factory), the :data:`ENCODER_PREFIXES`.
ENCODER_PREFIXES = ("hf:", "python:")
#: How an ``hf:`` encoder's outputs become its features (models/hf.py); ``auto`` picks by the model's type.
HF_POOLINGS = ("auto", "pooler", "cls", "mean")
#: The features the probes read (models/feature_layers.py): the encoder's output, or every stage pooled.
FEATURE_LAYERS = ("encoder", "stages")

# The ResNet (models/resnet.py).
RESNET_POOLINGS = ("avg", "grid")
#: The default network: three stages of one block each, 32, 64 and 128 channels wide, global average pooling.
RESNET_WIDTHS = (32, 64, 128)
RESNET_BLOCKS = (1, 1, 1)
RESNET_POOL = "avg"

#: The normalizations of the MLP encoder and the projection head (models/mlp.py, models/projection.py).
NORMS = ("batch", "none")

# The projection head (models/projection.py): the size of the embeddings, and SimCLR's two-layer head.
PROJECTION_DIM = 128
PROJECTION_LAYERS = 2

# The text transformer trained from scratch (models/text_transformer.py): 2 layers, 128 wide, 4 heads.
TEXT_WIDTH = 128
TEXT_LAYERS = 2
TEXT_HEADS = 4

# WPSE's point sets (Uesaka et al. 2025; models/point_set_head.py, models/point_set_models.py).
#: Where the points come from: every token (or feature-map cell), or the encoder's pooled features alone.
POINTS = ("tokens", "pooled")
#: How the weights are made: ``tanh`` and ``sigmoid`` of a learned projection, or ``ones`` (every weight 1).
WEIGHT_ACTIVATIONS = ("tanh", "sigmoid", "ones")
#: The paper's activation, ``scale * tanh(x / scale)``: signed weights, which its ablation found essential.
WEIGHT_ACTIVATION = "tanh"

# WPSE's kernels (similarity/kernels.py).
#: The nonlinear kernels by name.
NONLINEAR_KERNEL_NAMES = ("gaussian", "imq")
#: The nonlinear kernel of the official example configuration.
NONLINEAR_KERNEL = "gaussian"
#: The length scale of the nonlinear kernels: the Gaussian's sigma and the IMQ's c. 0.5 is the official code's
#: released models (both kernels) and example configuration; the paper searched {0.5, 0.75, 1.0}.
KERNEL_SCALE = 0.5
#: ``(alpha1, alpha2)``, the weights of the linear and the nonlinear kernel: the official code's example
#: configuration (sony/wpse ``wpse_gauss0.5_comb2-1``, "comb 2-1"), one of the five mixes the paper searched.
KERNEL_WEIGHTS = (0.667, 0.333)

# WPSE's embedding (similarity/wpse.py).
WPSE_POOLINGS = ("sum", "mean")
#: The pooling over a set's points: the official code's mean (the paper sums).
WPSE_POOLING = "mean"
#: D, the number of random features: 1,024 in training (redrawn every batch) and 512 in evaluation (App. A.1).
WPSE_TRAIN_FEATURES = 1024
WPSE_EVAL_FEATURES = 512
