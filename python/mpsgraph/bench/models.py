"""The benchmark's networks in PyTorch: a small CNN, and ResNet-18 and MobileNetV2 as torchvision
defines them (same layers, widths and strides; seeded random weights, eval mode). mpsgraph and
ONNX Runtime run them from torch.onnx.export's ONNX; torch runs the modules themselves."""
import io
import warnings


def _torch():
    import torch
    return torch, torch.nn


def small_cnn(num_classes=10):
    """conv3x3(32)-relu-maxpool-conv3x3(64)-relu-maxpool-conv3x3(128)-relu-global average-fc(10)."""
    torch, nn = _torch()

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, 1, 1), nn.ReLU()]

    return nn.Sequential(*block(3, 32), nn.MaxPool2d(2), *block(32, 64), nn.MaxPool2d(2), *block(64, 128),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, num_classes))


def resnet18(num_classes=1000):
    torch, nn = _torch()

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.downsample is None else self.downsample(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))

    return ResNet18()


def mobilenet_v2(num_classes=1000):
    torch, nn = _torch()

    def cbr(cin, cout, k, s, groups=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU6())

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            layers = [cbr(cin, hidden, 1, 1)] if t != 1 else []
            layers += [cbr(hidden, hidden, 3, stride, groups=hidden), nn.Conv2d(hidden, cout, 1, bias=False),
                       nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                   (6, 320, 1, 1)]
            layers, cin = [cbr(3, 32, 3, 2)], 32
            for t, c, n, s in cfg:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(cbr(cin, 1280, 1, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    return MobileNetV2()


NETWORKS = {"small_cnn": small_cnn, "resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def network(name):
    """The named torch module, eval mode, weights from seed 0 (the same in every process)."""
    torch, _ = _torch()
    torch.manual_seed(0)
    return NETWORKS[name]().eval()


def export(name, batch, image=224):
    """ONNX bytes of network(name) for input (batch, 3, image, image)."""
    torch, _ = _torch()
    net = network(name)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(batch, 3, image, image),), f, dynamo=False, input_names=["x"],
                          output_names=["logits"])
    return f.getvalue()


if __name__ == "__main__":  # python -m mpsgraph.bench.models NET BATCH IMAGE OUT.onnx (the harness's exporter)
    import sys
    with open(sys.argv[4], "wb") as out:
        out.write(export(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
