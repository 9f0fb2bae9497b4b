"""The zoo's own small models: what users bring beyond paddle.vision's CNNs (attention, gates,
upsampling, several inputs and outputs). This file is copied into each test project as model.py;
it imports paddle only. Inputs are sklearn's digits at 32x32, one channel."""
import paddle
import paddle.nn as nn
import paddle.nn.functional as F


def conv_bn(cin, cout, act="relu", stride=1):
    acts = {"relu": nn.ReLU(), "tanh": nn.Tanh()}
    return nn.Sequential(nn.Conv2D(cin, cout, 3, stride=stride, padding=1, bias_attr=False),
                         nn.BatchNorm2D(cout), acts[act])


class EncoderBlock(nn.Layer):
    """Pre-norm transformer block: LayerNorm, nn.MultiHeadAttention, LayerNorm, GELU MLP."""

    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiHeadAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, t):
        t = t + self.attn(self.ln1(t))
        return t + self.fc2(F.gelu(self.fc1(self.ln2(t))))


class ViTTiny(nn.Layer):
    """8x8 patches by a strided conv (16 tokens of width 96), a learned position embedding, two
    encoder blocks (4 heads, MLP ratio 4), mean pooling over the tokens, a linear head."""

    def __init__(self, num_classes=10, dim=96, depth=2, heads=4, patch=8, size=32):
        super().__init__()
        self.patch = nn.Conv2D(1, dim, patch, stride=patch)
        self.pos = self.create_parameter([1, (size // patch) ** 2, dim],
                                         default_initializer=nn.initializer.Normal(std=0.02))
        self.blocks = nn.LayerList([EncoderBlock(dim, heads, 4 * dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose([0, 2, 1]) + self.pos
        for block in self.blocks:
            t = block(t)
        return self.head(self.norm(t).mean(axis=1))


class SqueezeExcite(nn.Layer):
    def __init__(self, c, r=4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2D(1)
        self.fc1 = nn.Conv2D(c, c // r, 1)
        self.fc2 = nn.Conv2D(c // r, c, 1)

    def forward(self, x):
        return x * F.sigmoid(self.fc2(F.relu(self.fc1(self.pool(x)))))


class SECNN(nn.Layer):
    """Conv-BN-tanh stem, then conv blocks each gated by a sigmoid squeeze-excitation."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = conv_bn(1, 32, "tanh")
        self.b1 = nn.Sequential(conv_bn(32, 64, stride=2), SqueezeExcite(64))
        self.b2 = nn.Sequential(conv_bn(64, 128, stride=2), SqueezeExcite(128))
        self.pool = nn.AdaptiveAvgPool2D(1)
        self.head = nn.Linear(128, num_classes)

    def forward(self, x):
        y = self.pool(self.b2(self.b1(self.stem(x))))
        return self.head(paddle.reshape(y, [-1, 128]))


class UNetSeg(nn.Layer):
    """Two-level UNet: max-pool encoder, Conv2DTranspose up, bilinear F.interpolate up, skip
    concatenations; one logit per pixel (digit stroke or background)."""

    def __init__(self):
        super().__init__()
        self.enc1 = conv_bn(1, 16)
        self.enc2 = conv_bn(16, 32)
        self.mid = conv_bn(32, 64)
        self.up = nn.Conv2DTranspose(64, 32, 2, stride=2)
        self.dec2 = conv_bn(64, 32)
        self.dec1 = conv_bn(48, 16)
        self.out = nn.Conv2D(16, 1, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(paddle.concat([self.up(m), e2], axis=1))
        u = F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
        return self.out(self.dec1(paddle.concat([u, e1], axis=1)))


class TwoInput(nn.Layer):
    """A conv branch on the image and an MLP branch on its 16 row/column intensity profiles,
    concatenated before the head."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Sequential(conv_bn(1, 32, stride=2), conv_bn(32, 64, stride=2), conv_bn(64, 64),
                                  nn.AdaptiveAvgPool2D(1))
        self.mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
        self.head = nn.Linear(128, num_classes)

    def forward(self, image, profile):
        a = paddle.reshape(self.conv(image), [-1, 64])
        return self.head(paddle.concat([a, self.mlp(profile)], axis=1))


class TwoOutput(nn.Layer):
    """A shared trunk, class logits and a per-pixel sigmoid map (the digit's stroke mask)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.trunk = nn.Sequential(conv_bn(1, 32), conv_bn(32, 64, stride=2), conv_bn(64, 64))
        self.pool = nn.AdaptiveAvgPool2D(1)
        self.cls = nn.Linear(64, num_classes)
        self.seg = nn.Conv2D(64, 1, 1)

    def forward(self, x):
        f = self.trunk(x)
        logits = self.cls(paddle.reshape(self.pool(f), [-1, 64]))
        mask = F.sigmoid(F.interpolate(self.seg(f), scale_factor=2, mode="bilinear", align_corners=False))
        return logits, mask


class DigitsNet(nn.Layer):
    """The digits example's CNN (examples/digits/model.py): the zoo exports it as a legacy and
    as a PIR inference model, the way the Paddle toolkits hand models over."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(conv_bn(1, 16), nn.MaxPool2D(2), conv_bn(16, 32), nn.MaxPool2D(2),
                                      conv_bn(32, 64), nn.MaxPool2D(2))
        self.classifier = nn.Sequential(nn.Linear(64 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.classifier(paddle.flatten(self.features(x), 1))


class CRNN(nn.Layer):
    """An OCR recogniser as PP-OCR's CRNN: conv-BN-ReLU stages that pool the height of a
    16x64 line of four digits to 1, a 2-layer bidirectional LSTM over the 32 columns, a
    linear CTC head (10 digits + the blank, class 10)."""

    def __init__(self, num_classes=11, hidden=48):
        super().__init__()
        self.cnn = nn.Sequential(conv_bn(1, 32), nn.MaxPool2D(2), conv_bn(32, 64), nn.MaxPool2D((2, 1)),
                                 conv_bn(64, 64), nn.MaxPool2D((4, 1)))
        self.rnn = nn.LSTM(64, hidden, num_layers=2, direction="bidirect")
        self.head = nn.Linear(2 * hidden, num_classes)

    def forward(self, x):
        f = paddle.reshape(self.cnn(x), [-1, 64, 32])          # [N, C, 1, W] -> [N, C, W]
        y, _ = self.rnn(paddle.transpose(f, [0, 2, 1]))         # [N, W, 2 * hidden]
        return self.head(y)                                     # [N, W, classes]: CTC logits


class GRUClassifier(nn.Layer):
    """A digit read row by row: 16 rows of 16 pixels through a 2-layer GRU, the last state's
    logits."""

    def __init__(self, num_classes=10, hidden=64):
        super().__init__()
        self.rnn = nn.GRU(16, hidden, num_layers=2)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


class TextClassifier(nn.Layer):
    """A text model on int64 token ids: a digit read as text, its 64 pixel intensities (0-16)
    as tokens of a 17-word vocabulary; a token and a position embedding, two encoder blocks,
    mean pooling, a linear head (as ViTTiny: width 96, MLP ratio 4). The sequence length is free
    up to ``length``."""

    def __init__(self, num_classes=10, vocab=17, length=64, dim=96, depth=2, heads=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = self.create_parameter([1, length, dim], default_initializer=nn.initializer.Normal(std=0.02))
        self.blocks = nn.LayerList([EncoderBlock(dim, heads, 4 * dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, ids):
        # a free sequence length (up to ``length``): the first positions' embeddings
        t = self.tok(ids) + self.pos[:, :paddle.shape(ids)[1]]
        for block in self.blocks:
            t = block(t)
        return self.head(self.norm(t).mean(axis=1))
