#!/usr/bin/python3
"""ExaMoE PyTorch reference: forward/backward (and optional AdamW steps) of
the docs/architecture.md model on one batch. Run with Debian's /usr/bin/python3:

  run_reference.py --config cfg.json --weights ckpt.h5 --batch batch.h5 --out out.h5
                   [--dtype float32|float64] [--adamw-steps N --lr .. --beta1 ..
                   --beta2 .. --eps .. --weight-decay .. --grad-clip ..]

See README.md for the file formats."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from examoe_ref.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
