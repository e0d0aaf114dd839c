"""Deployment files for the chosen deployment (a `plan` row or the `search` winner): the `vllm serve` line, a
`docker run` line, a Kubernetes Deployment + Service, a KServe InferenceService and llm-d Helm values.

One `Deployment` (what to run: model, GPUs, replicas, the vLLM flags) is built from the plan or the search, and every
file is a pure function of it, so the flags, the GPU count and the memory are the same in all five. The vLLM flags
come from `vllm_flags`, which `search.serve_command` uses too.

What the files set beyond vLLM's flags, and where each choice comes from:
- image `vllm/vllm-openai:v<version>` (vLLM's image on Docker Hub, docs.vllm.ai deployment/docker); `rocm/vllm` for
  AMD GPUs. The command is set explicitly to `vllm serve` (`--entrypoint vllm ... serve` for docker, `command` in the
  pods): recent images start `vllm serve` by themselves, older ones the API server module, which takes `--model`;
- shared memory: `--ipc=host` for docker (vLLM's docker guide: PyTorch shares tensors between processes through
  /dev/shm), a memory-backed emptyDir of 2 GiB at /dev/shm for Kubernetes (vLLM's Kubernetes guide mounts
  `emptyDir: {medium: Memory, sizeLimit: 2Gi}`), plus 1 GiB per further GPU of the replica for NCCL's shared-memory
  transport between its ranks (an allowance, not a measurement);
- GPUs: `nvidia.com/gpu` (`amd.com/gpu`) = TP x PP per replica; a node affinity on GPU feature discovery's
  `nvidia.com/gpu.memory` label (MiB) asks for GPUs with at least the planned memory;
- host memory: the replica's weights (read through the page cache while loading) plus 4 GiB per GPU worker process
  (Python, torch and CUDA host allocations): a starting request, not a measurement;
- probes on vLLM's `/health`; a start-up probe that allows 30 minutes for download, load, profile and graph capture.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field

from .units import GiB, MiB

KINDS = ("serve", "docker", "kubernetes", "kserve", "llm-d")
PORT = 8000  # vllm serve's default port
SHM_BYTES = 2 * GiB  # vLLM's Kubernetes guide: /dev/shm emptyDir, sizeLimit 2Gi
SHM_PER_EXTRA_GPU = 1 * GiB  # NCCL shared-memory transport between the replica's ranks (an allowance)
HOST_BYTES_PER_GPU = 4 * GiB  # one vLLM worker process's host memory (an allowance)
LLMD_IMAGE = "ghcr.io/llm-d/llm-d-cuda"  # llm-d-modelservice's examples/values-pd.yaml
LLMD_CHART = "llm-d-modelservice v0.4.12"  # the chart whose values schema tests/test_deploy.py validates against


@dataclass(frozen=True)
class Deployment:
    """What to run, once: every deployment file is made from this."""

    model: str  # what vLLM loads: a hub id, a path, or a placeholder for a checkpoint to bring
    name: str  # a Kubernetes name (DNS-1035 label)
    gpu: str  # kvcalc's GPU id
    gpu_vendor: str  # nvidia | amd
    gpu_memory_bytes: int  # per GPU, as the driver reports it
    tp: int
    pp: int
    replicas: int
    vllm_version: str
    flags: tuple[tuple[str, str | None], ...]  # vLLM flags in order; None: a switch without a value
    weights_bytes: int  # one replica's weights, all its GPUs together
    source: str  # what this deployment is: "plan: vllm baseline", "search: rank 1"
    fits: bool = True
    notes: tuple[str, ...] = field(default=())

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def args(self) -> list[str]:
        """`vllm serve`'s arguments: the model, then the flags."""
        out = [self.model]
        for flag, value in self.flags:
            out += [flag] if value is None else [flag, value]
        return out

    @property
    def image(self) -> str:
        return ("rocm/vllm" if self.gpu_vendor == "amd" else "vllm/vllm-openai") + f":v{self.vllm_version}"

    @property
    def gpu_resource(self) -> str:
        return "amd.com/gpu" if self.gpu_vendor == "amd" else "nvidia.com/gpu"

    @property
    def shm_bytes(self) -> int:
        return SHM_BYTES + SHM_PER_EXTRA_GPU * (self.gpus_per_replica - 1)

    @property
    def host_memory_bytes(self) -> int:
        """Host memory per replica, rounded up to whole GiB."""
        raw = self.weights_bytes + HOST_BYTES_PER_GPU * self.gpus_per_replica
        return math.ceil(raw / GiB) * GiB

    def to_json(self) -> dict:
        return {"model": self.model, "name": self.name, "gpu": self.gpu, "gpu_memory_bytes": self.gpu_memory_bytes,
                "tp": self.tp, "pp": self.pp, "replicas": self.replicas, "gpus_per_replica": self.gpus_per_replica,
                "vllm_version": self.vllm_version, "image": self.image, "args": self.args,
                "shm_bytes": self.shm_bytes, "host_memory_bytes": self.host_memory_bytes, "source": self.source,
                "fits": self.fits, "notes": list(self.notes)}


# ------------------------------------------------------------------------------------------------ vLLM's flags


def model_argument(model: str, weights_format: str, spec=None) -> str:
    """What `vllm serve` loads for a weight format kvcalc plans as a what-if: int4 and compressed-tensors formats
    need a checkpoint in that format (the catalog's `<model>-awq` checkpoint where it has one, else a placeholder);
    fp8 and nf4 quantize the model's own weights."""
    if weights_format in ("awq", "gptq"):
        own = quantized_checkpoint(spec, weights_format) if spec is not None else None
        return own or f"<{weights_format.upper()} int4 checkpoint of {model}>"
    if weights_format in ("w4a16", "w8a8"):  # vLLM reads the scheme from the checkpoint's quantization_config
        return f"<compressed-tensors {weights_format.upper()} checkpoint of {model}>"
    return model


def quantized_checkpoint(spec, weights: str) -> str | None:
    """The hub id of the catalog's `<model>-<weights>` checkpoint (llama-3.1-8b-awq: an AWQ-INT4 repository), or
    None when the catalog knows none."""
    from .catalog import catalog_entry, catalog_names

    name = f"{spec.name}-{weights}"
    return catalog_entry(name).get("hf_id") if name in catalog_names() else None


def vllm_flags(weights_format: str, kv_format: str, tp: int, pp: int, util: float | None, max_model_len: int,
               max_num_seqs: int, max_num_batched_tokens: int, *, checkpoint_format: bool = False,
               extra: tuple[tuple[str, str | None], ...] = ()) -> tuple[tuple[str, str | None], ...]:
    """The vLLM flags of a deployment, in a fixed order. `checkpoint_format`: the model's own checkpoint already is in
    `weights_format` (vLLM reads its quantization_config), so no --quantization is added. `util` None: the flag is
    left out (--kv-cache-memory-bytes sets the budget instead)."""
    from .formats import kv_format as kv_of

    out: list[tuple[str, str | None]] = []
    # AWQ/GPTQ: no --quantization. vLLM reads the checkpoint's quant_method and picks the Marlin kernel; an explicit
    # `awq`/`gptq` forces the slow GEMM kernel in releases before 0.26 (awq_marlin.py "forcing awq")
    if not checkpoint_format:
        if weights_format == "fp8":
            out.append(("--quantization", "fp8"))
        elif weights_format in ("nf4", "nf4-dq"):
            out.append(("--quantization", "bitsandbytes"))
    if tp > 1:
        out.append(("--tensor-parallel-size", str(tp)))
    if pp > 1:
        out.append(("--pipeline-parallel-size", str(pp)))
    if util is not None:
        out.append(("--gpu-memory-utilization", f"{util:.2f}"))
    out += [("--max-model-len", str(max_model_len)), ("--max-num-seqs", str(max_num_seqs)),
            ("--max-num-batched-tokens", str(max_num_batched_tokens))]
    if kv_format != "auto":
        out.append(("--kv-cache-dtype", kv_of(kv_format).vllm_name))
    return tuple(out) + tuple(extra)


def k8s_name(text: str) -> str:
    """A DNS-1035 label from a model name: lower case, [a-z0-9-], starting with a letter, at most 63 characters."""
    name = "".join(ch if ch.isalnum() else "-" for ch in text.lower().split("/")[-1])
    name = "-".join(part for part in name.split("-") if part)
    name = ("vllm-" + name) if not name[:1].isalpha() else name
    return name[:63].rstrip("-") or "vllm"


# ------------------------------------------------------------------------------------------------ builders


def from_plan(req, row) -> Deployment:
    """The deployment of one vLLM plan row: the request's settings as explicit vLLM flags (so the server runs what
    was planned whatever its defaults), the row's formats, TP and PP."""
    from .errors import UsageError

    est = row.vllm
    if row.engine != "vllm" or est is None:
        raise UsageError(f"--emit writes vLLM deployments; the {row.engine} row {row.config} is not one")
    model = served_model(req.spec)
    from .checkpoint import baseline_weights

    own = baseline_weights(req.spec)  # a quantized checkpoint: vLLM reads its quantization_config itself
    checkpoint = own is not None and row.weights_format == own.name
    extra: list[tuple[str, str | None]] = []
    if req.kv_cache_memory_bytes:
        extra.append(("--kv-cache-memory-bytes", str(req.kv_cache_memory_bytes)))
    if req.block_size:
        extra.append(("--block-size", str(req.block_size)))
    if req.dtype:
        extra.append(("--dtype", req.dtype))
    if req.enforce_eager:
        extra.append(("--enforce-eager", None))
    if req.enable_lora:
        extra += [("--enable-lora", None), ("--max-loras", str(req.max_loras)),
                  ("--max-lora-rank", str(req.max_lora_rank))]
    if req.speculative_config:
        spec = {k: v for k, v in req.speculative_config.items() if k != "draft_config"}
        extra.append(("--speculative-config", json.dumps(spec, separators=(",", ":"))))
    if req.limit_mm_per_prompt:
        extra.append(("--limit-mm-per-prompt", json.dumps(req.limit_mm_per_prompt, separators=(",", ":"))))
    if req.language_model_only:
        extra.append(("--language-model-only", None))
    if req.skip_mm_profiling:
        extra.append(("--skip-mm-profiling", None))
    flags = vllm_flags(row.weights_format, row.kv_format, req.tp, req.pp,
                       None if req.kv_cache_memory_bytes else req.vllm_util, est.max_model_len, est.max_num_seqs,
                       est.max_num_batched_tokens, checkpoint_format=checkpoint, extra=tuple(extra))
    notes = [] if row.fits else [f"the plan says this does not fit (short {row.shortfall_bytes / GiB:.2f} GiB)"]
    return Deployment(model=model_argument(model, row.weights_format, req.spec) if not checkpoint else model,
                      name=k8s_name(req.spec.name), gpu=req.gpu.id, gpu_vendor=req.gpu.vendor,
                      gpu_memory_bytes=req.gpu.memory_total_bytes, tp=req.tp, pp=req.pp, replicas=1,
                      vllm_version=req.vllm_version, flags=flags,
                      weights_bytes=est.deployment_weights_bytes or row.weights_bytes,
                      source=f"plan: vllm {row.config}", fits=row.fits, notes=tuple(notes))


def served_model(spec) -> str:
    """What `vllm serve` is given for the planned model: the hub id of a catalog model or of a hub checkpoint, the
    folder of a local checkpoint or config.json (vLLM loads a folder), else the name."""
    from pathlib import Path

    from .catalog import catalog_entry, catalog_names

    source = getattr(spec, "source", "") or ""
    for prefix in ("catalog (", "hub "):
        if source.startswith(prefix):
            ident = source[len(prefix):].split(" ")[0].rstrip(")")
            if "/" in ident:
                return ident
    for prefix in ("folder ", "file "):
        if source.startswith(prefix):
            path = Path(source[len(prefix):])
            return str(path.parent if path.suffix == ".json" else path)
    if spec.name in catalog_names():
        return catalog_entry(spec.name).get("hf_id") or spec.name
    return spec.name


def from_search(result, rank: int = 1) -> Deployment:
    """The deployment of one ranked search result (rank 1: the winner)."""
    from .errors import UsageError
    from .hardware import get_gpu

    rows = [d for d in result.results if d.rank == rank]
    if not rows:
        raise UsageError(f"no deployment of rank {rank} in this search" if result.results else
                         "no deployment meets the targets: nothing to write")
    d, req = rows[0], result.request
    spec = req.spec
    model = served_model(spec)
    gpu = get_gpu(d.gpu)
    # weights of one replica: the formats' bytes as the search's memory core counted them
    from .engines.weights import weight_bytes
    from .formats import weight_format

    weights = weight_bytes(spec, weight_format(d.weights_format))
    return Deployment(model=model_argument(model, d.weights_format, spec), name=k8s_name(spec.name), gpu=gpu.id,
                      gpu_vendor=gpu.vendor, gpu_memory_bytes=gpu.memory_total_bytes, tp=d.tp, pp=d.pp,
                      replicas=d.replicas, vllm_version=req.vllm_version,
                      flags=vllm_flags(d.weights_format, d.kv_format, d.tp, d.pp, d.util, d.max_model_len,
                                       d.max_num_seqs, d.max_num_batched_tokens),
                      weights_bytes=int(weights), source=f"search: rank {rank}")


# ------------------------------------------------------------------------------------------------ the files


def serve_line(d: Deployment) -> str:
    """`vllm serve MODEL FLAGS`, quoted for a POSIX shell."""
    return "vllm serve " + " ".join(shlex.quote(a) for a in d.args)


def docker_line(d: Deployment) -> str:
    """`docker run` of vLLM's image with the deployment's GPUs, shared memory, port and the model cache."""
    if d.gpu_vendor == "amd":
        devices = "--device=/dev/kfd --device=/dev/dri --group-add video"
    else:
        devices = f"--gpus {d.gpus_per_replica}"
    return (f"docker run {devices} --ipc=host -p {PORT}:{PORT} -e HF_TOKEN "
            f"-v ~/.cache/huggingface:/root/.cache/huggingface --entrypoint vllm {d.image} serve "
            + " ".join(shlex.quote(a) for a in d.args))


def _labels(d: Deployment) -> dict:
    return {"app.kubernetes.io/name": d.name, "app.kubernetes.io/managed-by": "kvcalc"}


def _annotations(d: Deployment) -> dict:
    return {"kvcalc/source": d.source, "kvcalc/gpu": d.gpu, "kvcalc/vllm-version": d.vllm_version}


def _resources(d: Deployment) -> dict:
    gpus, mem = str(d.gpus_per_replica), f"{d.host_memory_bytes // GiB}Gi"
    return {"limits": {d.gpu_resource: gpus, "memory": mem}, "requests": {d.gpu_resource: gpus, "memory": mem}}


def _shm_volume(d: Deployment) -> dict:
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{d.shm_bytes // GiB}Gi"}}


def _gpu_affinity(d: Deployment) -> dict:
    """Nodes whose GPUs have at least the planned memory (GPU feature discovery's nvidia.com/gpu.memory, MiB)."""
    if d.gpu_vendor != "nvidia":
        return {}
    mib = d.gpu_memory_bytes // MiB
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": [str(mib - 1)]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _container(d: Deployment, port: int = PORT) -> dict:
    probe = {"httpGet": {"path": "/health", "port": port}}
    return {
        "name": "vllm", "image": d.image, "command": ["vllm", "serve"], "args": [*d.args, "--port", str(port)],
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token",
                                                                       "optional": True}}}],
        "ports": [{"containerPort": port, "name": "http", "protocol": "TCP"}],
        "resources": _resources(d),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        "startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": 180},
        "readinessProbe": {**probe, "periodSeconds": 10},
        "livenessProbe": {**probe, "periodSeconds": 30},
    }


def kubernetes_objects(d: Deployment) -> list[dict]:
    """A Deployment of `replicas` pods, each with the replica's GPUs, and a ClusterIP Service on port 8000."""
    selector = {"app.kubernetes.io/name": d.name}
    pod = {"containers": [_container(d)], "volumes": [_shm_volume(d)]}
    if _gpu_affinity(d):
        pod["affinity"] = _gpu_affinity(d)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": d.name, "labels": _labels(d), "annotations": _annotations(d)},
        "spec": {"replicas": d.replicas, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": _labels(d)}, "spec": pod}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": d.name, "labels": _labels(d)},
        "spec": {"type": "ClusterIP", "selector": selector,
                 "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}]},
    }
    return [deployment, service]


def kserve_object(d: Deployment) -> dict:
    """A KServe v1beta1 InferenceService running vLLM's image as the predictor's container (RawDeployment mode:
    a plain Deployment, no Knative)."""
    container = _container(d, port=8080)  # KServe routes to the predictor container's port 8080
    container["name"] = "kserve-container"
    predictor = {"minReplicas": d.replicas, "maxReplicas": d.replicas, "containers": [container],
                 "volumes": [_shm_volume(d)]}
    if _gpu_affinity(d):
        predictor["affinity"] = _gpu_affinity(d)
    return {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": d.name, "labels": _labels(d),
                     "annotations": {**_annotations(d), "serving.kserve.io/deploymentMode": "RawDeployment"}},
        "spec": {"predictor": predictor},
    }


def llmd_values(d: Deployment) -> dict:
    """Values for llm-d's modelservice chart (llm-d-modelservice v0.4.12): decode pods only (no prefill/decode
    split), `modelCommand: vllmServe` (the chart adds the model, --port, --served-model-name and
    --tensor-parallel-size from parallelism.tensor), the rest of the flags as args; the GPU limit is set explicitly
    because the chart counts only TP x data-local parallelism."""
    flags = [a for flag, value in d.flags if flag != "--tensor-parallel-size"
             for a in ([flag] if value is None else [flag, value])]
    gpus, mem = str(d.gpus_per_replica), f"{d.host_memory_bytes // GiB}Gi"
    container = {
        "name": "vllm", "image": f"{LLMD_IMAGE}:latest", "modelCommand": "vllmServe", "args": flags,
        "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": mem},
                      "requests": {"nvidia.com/gpu": gpus, "memory": mem}},
        "mountModelVolume": True,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {
        "modelArtifacts": {"name": d.model, "uri": f"hf://{d.model}",
                           "size": f"{math.ceil(d.weights_bytes * 1.1 / GiB) + 1}Gi"},
        "multinode": False,
        "accelerator": {"type": "amd" if d.gpu_vendor == "amd" else "nvidia"},
        "routing": {"servicePort": PORT},
        "decode": {"create": True, "replicas": d.replicas, "parallelism": {"tensor": d.tp},
                   "containers": [container], "volumes": [_shm_volume(d)]},
        "prefill": {"create": False},
    }


def _yaml(docs: list[dict], header: str) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):  # a probe repeated is written out, not as a YAML anchor
            return True

    body = "---\n".join(yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=120) for doc in docs)
    return header + body


def _header(d: Deployment, what: str) -> str:
    lines = [f"# {what} written by kvcalc for {d.source}: {d.replicas} x {d.gpus_per_replica} {d.gpu}, "
             f"vLLM {d.vllm_version}"]
    lines += [f"# warning: {note}" for note in d.notes]
    return "\n".join(lines) + "\n"


def emit(d: Deployment, kind: str) -> str:
    """The text of one deployment file (`kind` in KINDS)."""
    from .errors import UsageError

    many = f"# one of {d.replicas} replicas ({d.source}): start one per {d.gpus_per_replica} GPU(s)\n" \
        if d.replicas > 1 else ""
    if kind == "serve":
        return many + serve_line(d) + "\n"
    if kind == "docker":
        return many + docker_line(d) + "\n"
    if kind == "kubernetes":
        return _yaml(kubernetes_objects(d), _header(d, "Kubernetes Deployment + Service"))
    if kind == "kserve":
        return _yaml([kserve_object(d)], _header(d, "KServe InferenceService"))
    if kind == "llm-d":
        return _yaml([llmd_values(d)], _header(d, f"Helm values for {LLMD_CHART}"))
    raise UsageError(f"--emit {kind!r}: choose one of {', '.join(KINDS)}")


def emit_all(d: Deployment) -> dict[str, str]:
    return {kind: emit(d, kind) for kind in KINDS}
