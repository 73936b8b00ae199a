#!/usr/bin/env python
"""Train a MindFormers model with mf_memopt's recompute/swap plan.

    python run_mindformer_memopt.py --config configs/llama_tiny.yaml --run_mode train
    bash scripts/msrun_launcher.sh "run_mindformer_memopt.py --config configs/llama_tiny.yaml \
        --run_mode train --use_parallel True" 2
"""

import sys

from mf_memopt.launch import main

if __name__ == "__main__":
    sys.exit(main())
