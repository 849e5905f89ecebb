"""What the streamed layers' tests share: blocks of a small MLP, running them plainly, and blocks that
record the weights they see."""

HOST = {"jitter_us": 30, "seed": 3}


def _blocks(torch, count=6, width=32, seed=0):
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.ModuleList([nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                                        nn.LayerNorm(width)) for _ in range(count)])


def _run(blocks, x, order=None):
    for k in order if order is not None else range(len(blocks)):
        x = blocks[k](x)
    return x


def _plain(torch, blocks, x, order=None):
    with torch.no_grad():
        return _run(blocks, x, order)


class Probe:
    """Blocks that record the weights they see while they run: their value and where they lie."""

    @staticmethod
    def blocks(torch, count):
        class Block(torch.nn.Module):
            def __init__(self, k):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.full((3, 5), float(k)))
                self.bias = torch.nn.Parameter(torch.full((7,), -float(k)), requires_grad=False)
                self.seen = []

            def forward(self, x):
                self.seen.append((float(self.weight[0, 0]), float(self.bias[0]), self.weight.data_ptr()))
                return x + 1

        return torch.nn.ModuleList([Block(k) for k in range(count)])


def _gpu_blocks(torch, count=8, width=1024):
    blocks = _blocks(torch, count, width).to(torch.bfloat16)
    return blocks
