"""A small CNN for sklearn's 8x8 digits, upscaled to 32x32."""
import paddle
from paddle import nn


class DigitsNet(nn.Layer):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(1, 16, 3, padding=1), nn.BatchNorm2D(16), nn.ReLU(), nn.MaxPool2D(2),
            nn.Conv2D(16, 32, 3, padding=1), nn.BatchNorm2D(32), nn.ReLU(), nn.MaxPool2D(2),
            nn.Conv2D(32, 64, 3, padding=1), nn.BatchNorm2D(64), nn.ReLU(), nn.MaxPool2D(2),
        )
        self.classifier = nn.Sequential(nn.Linear(64 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = paddle.flatten(x, 1)
        return self.classifier(x)
