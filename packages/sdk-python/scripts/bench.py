#!/usr/bin/env python3
"""Times the Python SDK on one sandbox, for bench/run.ts's rows beside the TypeScript SDK's:
``commands.run("true")``, and a 1 MiB ``files.write`` and ``files.read``, each after a warm-up,
one call after another. Prints one JSON line of samples in milliseconds.

    python3 packages/sdk-python/scripts/bench.py --url URL --sandbox ID --token TOKEN [--exec 300] [--io 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any, Awaitable, Callable, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from warren import AsyncSandbox  # noqa: E402

MiB = 1024 * 1024


async def time_it(n: int, fn: Callable[[], Awaitable[Any]], warmup: int = 5) -> List[float]:
    for _ in range(min(warmup, n)):
        await fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--exec", type=int, default=300)
    parser.add_argument("--io", type=int, default=100)
    args = parser.parse_args()
    sandbox = await AsyncSandbox.connect(args.sandbox, token=args.token, base_url=args.url)
    try:
        one = os.urandom(MiB)
        execs = await time_it(args.exec, lambda: sandbox.commands.run("true"))
        await sandbox.files.write("bench-py-1m.bin", one)
        writes = await time_it(args.io, lambda: sandbox.files.write("bench-py-1m.bin", one))
        reads = await time_it(args.io, lambda: sandbox.files.read("bench-py-1m.bin", format="bytes"))
        await sandbox.files.delete("bench-py-1m.bin")
    finally:
        await sandbox.close()
    print(json.dumps({"exec": execs, "write": writes, "read": reads}))


if __name__ == "__main__":
    asyncio.run(main())
