#!/usr/bin/env python
"""MindFormers' run_mindformer.py with mf_memopt's recompute/swap plan in place of LayerSetting.

The model is built with MindFormers' own handling off, the plan is applied, and MindFormers'
Trainer trains it with the YAML's dataset, optimizer, lr schedule, wrapper, callbacks and
checkpoints:

    python run_mindformer_memopt.py --config configs/llama_tiny.yaml --run_mode train
    bash scripts/msrun_launcher.sh "run_mindformer_memopt.py --config configs/llama_tiny.yaml \
        --run_mode train --use_parallel True" 2
"""

import sys

from mf_memopt.runtime.launch import main

if __name__ == "__main__":
    sys.exit(main())
