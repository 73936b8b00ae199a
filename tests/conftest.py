import os
import sys
from pathlib import Path

os.environ.setdefault("GLOG_v", "3")  # keep MindSpore quiet
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/fakes.py
