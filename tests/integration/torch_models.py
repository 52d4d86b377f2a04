"""Small TorchScript models for the integration tests, made with torch.jit.script.

The TorchScript twins of tests/integration/models.py's ONNX models (same
input and output names, dtypes and shapes, same results), so that a test
parametrised over `backend` runs the same requests on either:

  id_<dtype>   forward(data [N, M], scalar []) -> (data_out, scalar_out)
               -- every dtype libtorch has (TORCH_DTYPES)
  addmul       forward(lhs [N, 4], rhs [N, 4]) -> y = lhs * rhs + lhs
  scalar       forward(scale [], vec [N]) -> (y = vec * scale, scale2 = scale + scale)
  two_out      forward(x [N, 4]) -> (sum = x + x, prod = x * x)

and a few of their own:

  mlp          forward(x [N, 4]) -> y [N, 3]: Linear(4, 8), ReLU, Linear(8, 3) with
               seeded weights (mlp_ref computes it with torch)
  named        forward(x [N, 2]) -> {"double": x * 2, "count": x.size(0) as int64 [1]}

A TorchScript file records no dtypes or shapes, so each model comes with the
pool's backend_options that declare them (OPTIONS[name], torch_pools.py, which
needs no torch: pool(...) builds a whole pool entry for either backend).
"""

from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch

from torch_pools import OPTIONS, TORCH_DTYPES, pool  # noqa: F401 (the pool entries)

class Identity(torch.nn.Module):
    def forward(self, data: torch.Tensor, scalar: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return data, scalar


class AddMul(torch.nn.Module):
    def forward(self, lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
        return lhs * rhs + lhs


class Scalar(torch.nn.Module):
    def forward(self, scale: torch.Tensor, vec: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return vec * scale, scale + scale


class TwoOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x + x, x * x


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1234)
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Named(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"double": x * 2, "count": torch.tensor([x.size(0)], dtype=torch.int64)}


BUILDERS = {"id_" + dt: Identity for dt in TORCH_DTYPES}
BUILDERS.update(addmul=AddMul, scalar=Scalar, two_out=TwoOut, mlp=Mlp, named=Named)


def write_all(directory):
    """Writes every model into `directory` as <name>.pt; returns {name: Path}."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, cls in BUILDERS.items():
        p = d / (name + ".pt")
        torch.jit.save(torch.jit.script(cls().eval()), str(p))
        out[name] = p
    return out


def mlp_ref(x):
    """What the mlp model computes, with torch in this process."""
    with torch.no_grad():
        return Mlp().eval()(torch.from_numpy(np.ascontiguousarray(x))).numpy()
