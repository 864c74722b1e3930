"""Files GPU Steward ships as package data: prompts, runbooks and the example policy.

They live inside the package so a wheel install (no source tree) finds them; the
top-level `prompts/`, `runbooks/` and `examples/policy.yaml` in a checkout are links here.
"""

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
PROMPTS_DIR = ASSETS_DIR / "prompts"
RUNBOOKS_DIR = ASSETS_DIR / "runbooks"
EXAMPLE_POLICY = ASSETS_DIR / "policy.example.yaml"
