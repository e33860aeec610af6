#!/usr/bin/env python3
"""The usual Python deployment of a ranzcr model, as a baseline for `ranzcr serve`: FastAPI + uvicorn + PyTorch.

What it serves: the weights of `ranzcr export --checkpoint best.pt --out model.safetensors` (timm names, with the
metadata model_name, label_names, in_chans, input_size, mean, std and ranzcr_config, the training run's resolved
YAML), in a model built by pytorch_reference.create_model (timm when it imports, else torchvision, else the
built-in ports of models/resnet.cpp and models/tiny_cnn.cpp; timm's resnet names are renamed onto the built-in
port), loaded strict, in eval mode, run under torch.inference_mode() in float32 on the CPU.

Endpoints:
  POST /v1/predict  raw body = one JPEG or PNG file (any Content-Type). 200 {"labels": [...], "probabilities":
                    {name: p}, "models": [model_name], "seconds": {...}}; 400 {"error": ...} when the body is
                    not a decodable JPEG/PNG (DICOM is refused: ranzcr decodes it in its sandbox, this baseline
                    does not); 413 over --max-body-mb; 503 {"error": ...} when the batched queue is full.
  GET  /readyz      200 {"status": "ready"} (the model is loaded and warmed up before the socket opens).

Preprocessing = ranzcr's eval path (data/image_pipeline.cpp decode_grayscale, prepare_decoded, transform_u8 with
train=false, to_float; engine/runtime/device_batches.cpp normalize_input): grayscale decode (JPEG: the reduced
IMREAD_REDUCED_GRAYSCALE_2/4/8 decode when the short side is at least 2/4/8 x the prepared side), resized to the
prepared side (data.cache_size, or image_size * (1 + augment.scale) rounded up to 32; INTER_AREA when shrinking,
bilinear when enlarging), CLAHE(2.0, 8x8) when data.augment.clahe, resized to data.image_size the same way,
/255, (x - mean) / std per channel, the grey channel repeated to in_chans; logits averaged with the flipped image
when train.tta_hflip; probabilities = sigmoid(logits).

Modes:
  per-request  one forward per request; decode + forward run in a thread pool (the event loop is never blocked):
               Starlette's default pool (anyio, 40 threads) or --pool-threads N. This is what a typical FastAPI
               app does: concurrent forwards share the torch intra-op threads.
  batched      a simple fair dynamic batcher: requests decode in the thread pool, then wait in one FIFO
               asyncio.Queue (--max-queue, 0 = unbounded; full = 503); a background task takes the first waiting
               request, then more until --max-batch or --max-wait-ms after the first, and runs one forward per
               batch in a single worker thread; the next batch is collected after that forward (the queue fills
               meanwhile, so a loaded server runs full batches back to back).

Processes: uvicorn with one worker process (--workers 1, the default). --workers N starts N processes, each
loading its own copy of the model (N x the memory; give each --threads cores/N).

Usage: serve_reference.py --model model.safetensors [--host 127.0.0.1] [--port 8000] [--mode per-request|batched]
                          [--threads N] [--max-batch 16] [--max-wait-ms 5] [--max-queue 0] [--pool-threads 0]
                          [--workers 1] [--max-body-mb 64] [--model-source auto|timm|torchvision|builtin]
Needs fastapi, uvicorn, torch, numpy, opencv, PyYAML, safetensors (and timm for models not built in).
"""
import argparse
import asyncio
import concurrent.futures
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no scripts/bench/__pycache__ from importing pytorch_reference

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from safetensors import safe_open  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402

import pytorch_reference as ref  # noqa: E402

ARGS_ENV = "RANZCR_SERVE_REFERENCE_ARGS"  # the parsed options, for uvicorn's worker processes (--workers > 1)

# core/pixel_budget.h
MAX_IMAGE_PIXELS = 1 << 28
FREE_IMAGE_PIXELS = 1 << 24
PIXELS_PER_FILE_BYTE = 128


class BadImage(Exception):
    pass


# ---------------------------------------------------------------- model
def builtin_names(names):
    """timm resnet state-dict names -> pytorch_reference.ResNet's (stem / stages), for when timm does not import."""
    deep = any(n.startswith("conv1.0.") for n in names)
    out = {}
    for n in names:
        m = n
        if n.startswith("conv1."):
            m = "stem." + n[len("conv1."):] if deep else "stem.0." + n[len("conv1."):]
        elif n.startswith("bn1."):
            m = ("stem.7." if deep else "stem.1.") + n[len("bn1."):]
        else:
            g = re.match(r"layer(\d+)\.(.*)$", n)
            if g:
                m = f"stages.{int(g.group(1)) - 1}.{g.group(2)}"
        out[n] = m
    return out


def load_model(path, source):
    """(model, meta): the exported weights in pytorch_reference's model, strict, eval, float32."""
    with safe_open(path, "pt") as f:
        meta = dict(f.metadata() or {})
        weights = {k: f.get_tensor(k) for k in f.keys()}
    for key in ("model_name", "label_names", "in_chans", "input_size"):
        if key not in meta:
            ref.fail(f"{path}: no '{key}' in the safetensors metadata (write it with `ranzcr export`)")
    labels = json.loads(meta["label_names"])
    in_chans = int(meta["in_chans"])
    cfg = ref.merge(ref.DEFAULTS, yaml.safe_load(meta.get("ranzcr_config", "")) or {})
    cfg["model"].setdefault("input_mean", [0.0])
    cfg["model"].setdefault("input_std", [1.0])
    mean = json.loads(meta["mean"]) if "mean" in meta else list(cfg["model"]["input_mean"])
    std = json.loads(meta["std"]) if "std" in meta else list(cfg["model"]["input_std"])
    input_size = json.loads(meta["input_size"])
    if int(input_size[1]) != int(cfg["data"]["image_size"]):
        ref.fail(f"{path}: input_size {input_size} but ranzcr_config data.image_size {cfg['data']['image_size']}")
    model, built_by = ref.create_model(meta["model_name"], in_chans, len(labels), 0.0, source)
    if built_by == "builtin" and isinstance(model, ref.ResNet):
        weights = {builtin_names(weights)[k]: v for k, v in weights.items()}
    model.load_state_dict(weights, strict=True)
    model.eval().float()
    info = {"model_name": meta["model_name"], "built_by": built_by, "labels": labels, "in_chans": in_chans,
            "mean": [float(v) for v in mean], "std": [float(v) for v in std],
            "image_size": int(cfg["data"]["image_size"]), "prepared_size": ref.prepared_size(cfg["data"]),
            "clahe": bool(cfg["data"]["augment"].get("clahe", False)),
            "tta_hflip": bool(cfg.get("train", {}).get("tta_hflip", False))}
    return model, info


# ---------------------------------------------------------------- preprocessing (data/image_pipeline.cpp, eval)
def resize_to(gray, s):
    if gray.shape == (s, s):
        return gray
    interp = cv2.INTER_AREA if gray.shape[0] > s or gray.shape[1] > s else cv2.INTER_LINEAR
    return cv2.resize(gray, (s, s), interpolation=interp)


def check_pixels(w, h, size):
    if not (w > 0 and h > 0 and w <= MAX_IMAGE_PIXELS // h):
        raise BadImage(f"image declares {w} x {h} pixels, expected 1 to 268 million (16384 x 16384)")
    if w * h > FREE_IMAGE_PIXELS and w * h // PIXELS_PER_FILE_BYTE > size:
        raise BadImage(f"image declares {w} x {h} pixels in a file of {size} bytes")


def decode_prepare(body, info):
    """Raw file bytes -> float32 image_size x image_size in [0, 1] (the eval transform)."""
    if not body:
        raise BadImage("empty body: send one JPEG or PNG file as the request body")
    prepared = info["prepared_size"]
    flags = cv2.IMREAD_GRAYSCALE
    if len(body) >= 132 and body[128:132] == b"DICM":
        raise BadImage("DICOM is not decoded by this reference server (send JPEG or PNG)")
    if len(body) > 4 and body[0] == 0xFF and body[1] == 0xD8:
        wh = ref.jpeg_size(body)
        end = len(body.rstrip(b"\0"))
        if wh is None or end < 4 or body[end - 2:end] != b"\xff\xd9":
            raise BadImage("corrupt or truncated JPEG")
        check_pixels(wh[0], wh[1], len(body))
        side = min(wh)
        for k, flag in ((8, cv2.IMREAD_REDUCED_GRAYSCALE_8), (4, cv2.IMREAD_REDUCED_GRAYSCALE_4),
                        (2, cv2.IMREAD_REDUCED_GRAYSCALE_2)):
            if side >= k * prepared:
                flags = flag
                break
    elif body[:8] == b"\x89PNG\r\n\x1a\n":
        if len(body) < 24 or body[12:16] != b"IHDR":
            raise BadImage("corrupt PNG (no IHDR chunk first)")
        check_pixels(int.from_bytes(body[16:20], "big"), int.from_bytes(body[20:24], "big"), len(body))
    else:
        raise BadImage("the body is not a JPEG or PNG file")
    img = cv2.imdecode(np.frombuffer(body, np.uint8), flags)
    if img is None or img.size == 0:
        raise BadImage("cannot decode the image (corrupt or not an image)")
    img = resize_to(img, prepared)
    if info["clahe"]:
        img = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8)).apply(img)
    img = resize_to(img, info["image_size"])
    out = img.astype(np.float32)
    out *= 1.0 / 255.0
    return out


def normalize(x, info):
    """engine/runtime/device_batches.cpp normalize_input, then the grey channel repeated to in_chans."""
    mean, std = info["mean"], info["std"]
    if not (all(m == 0.0 for m in mean) and all(s == 1.0 for s in std)):
        channels = max(len(mean), len(std), x.shape[1])
        x = torch.cat([(x[:, min(c, x.shape[1] - 1):min(c, x.shape[1] - 1) + 1] - mean[min(c, len(mean) - 1)])
                       / std[min(c, len(std) - 1)] for c in range(channels)], 1)
    if x.shape[1] != info["in_chans"]:
        x = x.expand(-1, info["in_chans"], -1, -1)
    return x.contiguous()


# ---------------------------------------------------------------- app
class Server:
    def __init__(self, opts):
        self.opts = opts
        torch.set_num_threads(opts.threads if opts.threads > 0 else (len(os.sched_getaffinity(0)) or 1))
        t0 = time.perf_counter()
        self.model, self.info = load_model(opts.model, opts.model_source)
        self.load_seconds = time.perf_counter() - t0
        self.forward_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forward")
        self.pool = (concurrent.futures.ThreadPoolExecutor(opts.pool_threads, thread_name_prefix="pool")
                     if opts.pool_threads > 0 else None)
        self.queue = None
        s = self.info["image_size"]
        for n in sorted({1, opts.max_batch if opts.mode == "batched" else 1}):
            self.forward(torch.zeros(n, 1, s, s))

    def forward(self, x):
        """[B, 1, S, S] in [0, 1] -> [B, classes] float32 probabilities."""
        with torch.inference_mode():
            x = normalize(x, self.info)
            logits = self.model(x).float()
            if self.info["tta_hflip"]:
                logits = 0.5 * (logits + self.model(x.flip(3)).float())
            return torch.sigmoid(logits).numpy()

    async def in_pool(self, fn, *args):
        if self.pool is None:
            return await run_in_threadpool(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def answer(self, probs, seconds, extra=None):
        labels = self.info["labels"]
        out = {"labels": labels, "probabilities": {n: float(p) for n, p in zip(labels, probs)},
               "models": [self.info["model_name"]], "seconds": seconds}
        if extra:
            out.update(extra)
        return JSONResponse(out)

    # per-request: decode + forward in one pool call
    def predict_one(self, body):
        t0 = time.perf_counter()
        img = decode_prepare(body, self.info)
        t1 = time.perf_counter()
        probs = self.forward(torch.from_numpy(img)[None, None])[0]
        t2 = time.perf_counter()
        return probs, {"decode": t1 - t0, "forward": t2 - t1}

    # batched: the background collector
    async def batcher(self):
        loop = asyncio.get_running_loop()
        max_batch, max_wait = self.opts.max_batch, self.opts.max_wait_ms / 1000.0
        pending = None  # a q.get() carried over (never cancelled, so no request is ever lost)
        while True:
            if pending is None:
                pending = asyncio.ensure_future(self.queue.get())
            items = [await pending]
            pending = None
            deadline = loop.time() + max_wait
            while len(items) < max_batch:
                try:
                    items.append(self.queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                pending = asyncio.ensure_future(self.queue.get())
                done, _ = await asyncio.wait({pending}, timeout=remaining)
                if not done:
                    break
                items.append(pending.result())
                pending = None
            t0 = time.perf_counter()
            try:
                x = torch.from_numpy(np.stack([it[0] for it in items]))[:, None]
                probs = await loop.run_in_executor(self.forward_pool, self.forward, x)
            except Exception as e:  # noqa: BLE001 - every waiting request gets the error
                for it in items:
                    if not it[1].done():
                        it[1].set_exception(e)
                continue
            t1 = time.perf_counter()
            for i, (_, fut, enq) in enumerate(items):
                if not fut.done():
                    fut.set_result((probs[i], {"queue": t0 - enq, "forward": t1 - t0}, len(items)))


def create_app(opts=None):
    if opts is None:  # a uvicorn worker process (--workers > 1)
        opts = argparse.Namespace(**json.loads(os.environ[ARGS_ENV]))
    srv = Server(opts)
    i = srv.info
    print(f"serve_reference: {i['model_name']} ({i['built_by']} model, {len(i['labels'])} labels, in_chans "
          f"{i['in_chans']}, image_size {i['image_size']}, prepared {i['prepared_size']}, tta {i['tta_hflip']}) "
          f"loaded from {opts.model} in {srv.load_seconds:.2f} s, pid {os.getpid()}", file=sys.stderr, flush=True)
    app = FastAPI(title="ranzcr serve reference (FastAPI + PyTorch)", docs_url=None, redoc_url=None,
                  openapi_url=None, lifespan=_lifespan(srv))
    max_body = int(opts.max_body_mb * (1 << 20))

    async def read_body(request):
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > max_body:
            return None
        body = await request.body()
        return None if len(body) > max_body else body

    too_big = {"error": f"request body over --max-body-mb {opts.max_body_mb}"}

    @app.get("/readyz")
    async def readyz():
        return JSONResponse({"status": "ready", "model": srv.info["model_name"], "mode": opts.mode})

    if opts.mode == "per-request":
        @app.post("/v1/predict")
        async def predict(request: Request):
            t0 = time.perf_counter()
            body = await read_body(request)
            if body is None:
                return JSONResponse(too_big, status_code=413)
            try:
                probs, seconds = await srv.in_pool(srv.predict_one, body)
            except BadImage as e:
                return JSONResponse({"error": str(e)}, status_code=400)
            seconds["total"] = time.perf_counter() - t0
            return srv.answer(probs, seconds)
    else:
        @app.post("/v1/predict")
        async def predict(request: Request):
            t0 = time.perf_counter()
            body = await read_body(request)
            if body is None:
                return JSONResponse(too_big, status_code=413)
            try:
                img = await srv.in_pool(decode_prepare, body, srv.info)
            except BadImage as e:
                return JSONResponse({"error": str(e)}, status_code=400)
            t1 = time.perf_counter()
            fut = asyncio.get_running_loop().create_future()
            try:
                srv.queue.put_nowait((img, fut, time.perf_counter()))
            except asyncio.QueueFull:
                return JSONResponse({"error": f"queue full (--max-queue {opts.max_queue})"}, status_code=503)
            probs, seconds, batch = await fut
            seconds = {"decode": t1 - t0, **seconds, "total": time.perf_counter() - t0}
            return srv.answer(probs, seconds, {"batch_size": batch})

    return app


def _lifespan(srv):
    import contextlib

    @contextlib.asynccontextmanager
    async def lifespan(app):
        task = None
        if srv.opts.mode == "batched":
            srv.queue = asyncio.Queue(maxsize=max(0, srv.opts.max_queue))
            task = asyncio.create_task(srv.batcher())
        yield
        if task is not None:
            task.cancel()
    return lifespan


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="the .safetensors file of `ranzcr export`")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--mode", choices=["per-request", "batched"], default="per-request")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads per process (0 = all cores)")
    p.add_argument("--max-batch", type=int, default=16, help="batched: most requests per forward")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="batched: wait after the first request")
    p.add_argument("--max-queue", type=int, default=0, help="batched: waiting requests (0 = unbounded; full: 503)")
    p.add_argument("--pool-threads", type=int, default=0,
                   help="decode/forward thread pool size (0 = Starlette's default pool, 40 threads)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes, each its own model copy")
    p.add_argument("--max-body-mb", type=float, default=64.0)
    p.add_argument("--model-source", choices=["auto", "timm", "torchvision", "builtin"], default="auto")
    p.add_argument("--log-level", default="warning", help="uvicorn's log level")
    opts = p.parse_args()
    if opts.max_batch < 1 or opts.max_wait_ms < 0 or opts.workers < 1:
        ref.fail("--max-batch and --workers must be >= 1, --max-wait-ms >= 0")
    if not os.path.isfile(opts.model):
        ref.fail(f"--model {opts.model}: no such file")

    import uvicorn
    common = dict(host=opts.host, port=opts.port, log_level=opts.log_level, access_log=False)
    if opts.workers > 1:
        os.environ[ARGS_ENV] = json.dumps(vars(opts))
        print(f"serve_reference: {opts.workers} uvicorn workers, each loads the model; "
              f"serving on http://{opts.host}:{opts.port} once /readyz answers", flush=True)
        uvicorn.run("serve_reference:create_app", factory=True, workers=opts.workers, app_dir=HERE, **common)
        return
    app = create_app(opts)
    server = uvicorn.Server(uvicorn.Config(app, workers=1, **common))

    async def announce():
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"serve_reference: mode {opts.mode}, torch threads {torch.get_num_threads()}, 1 uvicorn worker; "
              f"serving on http://{opts.host}:{opts.port}", flush=True)

    async def run():
        t = asyncio.create_task(announce())
        await server.serve()
        t.cancel()

    asyncio.run(run())


if __name__ == "__main__":
    main()
