"""MultiPipeline: one pipeline per GPU over shares of the items (see sluice::MultiPipeline)."""
from __future__ import annotations

import weakref

from . import _options, _sluice
from ._sluice import MultiReport
from .pipeline import Chunk, _Spans


class MultiPipeline(_Spans):
    """Host arrays through work on several GPUs at once.

        p = sluice.MultiPipeline([0, 1])
        x, y = p.input(a), p.output(b)
        p.compute(lambda chunk, part: torch.mul(chunk[x], 2, out=chunk[y]))
        report = p.run()                  # report.parts[k]: device, items (begin, end), report

    Each GPU gets a contiguous share of the items (equal at first, then in
    proportion to the speed each reached in the last run; set_weights() sets
    the next run's shares) and a pipeline of its own. The callable is called
    from every GPU's thread, one at a time under the GIL, with chunks that
    carry global item ranges; torch work in it lands on the chunk's GPU and
    stream. A device may be named twice (two pipelines sharing one GPU).
    """

    def __init__(self, devices, **options):
        self.devices = list(devices)
        super().__init__(_sluice._MultiPipeline(self.devices, **_options.PIPELINE.given(options, leave_out=("device",))))

    @property
    def _core(self):
        return self._cpp

    def compute(self, fn):
        """fn(chunk, part): part is the index into the devices; chunk.device is that GPU."""
        me = weakref.proxy(self)  # the C++ side holds `call`: a strong reference would keep self alive for ever
        devices = self.devices
        self._core.compute(lambda info, part: me._call_in_chunk(fn, Chunk(me, info, devices[part]), part))
        return self

    def set_weights(self, weights):
        """The parts' shares of the next run, one weight per device."""
        self._core.set_weights([float(w) for w in weights])

    def run(self) -> MultiReport:
        return self._core.run()


MultiPipeline.__init__.__signature__ = _options.PIPELINE.signature(("devices",), leave_out=("device",))
MultiPipeline.__doc__ += "\n" + _options.PIPELINE.doc(leave_out=("device",))
