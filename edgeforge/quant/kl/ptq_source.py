"""The guard of the PTQ patch: the sha256 of each Paddle 3.3 PostTrainingQuantization method
that :mod:`.ptq_methods` mirrors. A method is replaced only while Paddle's source hashes to
exactly this (the source as ``inspect.getsource`` gives it, dedented and stripped); quantize()
is replaced only together with the other two.

To move to a new Paddle, read its methods against ptq_methods.py, port what changed, and put
the new digests here (``python -m edgeforge.quant.kl.ptq_source`` prints them)."""
from __future__ import annotations

import hashlib
import inspect

ORIGINAL_DIGESTS = {
    "_sample_histogram": "ddb5a4e1e23d836230aec4ec059a03b47da990bf6231e1213325448a9a06c469",
    "_collect_activation_abs_min_max": "b77dda085c8bee4503cc6e14bb9fcc07437f02450eb2c711ff2cfe28a31889ec",
    "quantize": "7f399218a659dfe00ce273b01f59fc120374e8b6c92191f776d8ecaadf3d6e3c",
}


def source_digest(fn) -> str | None:
    """sha256 of ``fn``'s source, normalised as the digests above were taken; None without one."""
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(inspect.cleandoc("\n" + src).strip().encode()).hexdigest()


if __name__ == "__main__":      # the digests of the installed Paddle
    from paddle.static.quantization.post_training_quantization import PostTrainingQuantization
    for _name in ORIGINAL_DIGESTS:
        print(f'    "{_name}": "{source_digest(PostTrainingQuantization.__dict__[_name])}",')
