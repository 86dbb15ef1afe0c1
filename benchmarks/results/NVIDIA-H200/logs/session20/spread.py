"""Why the bench's training row reads 1.74 ms in some processes and 2.0-2.1 in others (session 20, run 4): in
separate processes, the bench's own measurement (do_bench, gradients set to None each call) beside the process's
host time a step (20 steps in a row behind ~0.1 s of queued device work, median of 5), x.add_'s, the CPU the
main thread runs on and the process's threads."""
import json
import os
import statistics
import subprocess
import sys
import threading
import time


def worker():
    import torch
    import triton.testing

    from evofuse.bench import training_step
    from evofuse.suite import SUITE, make_inputs, make_module

    case = next(c for c in SUITE if c.name == "opm-af2-main")
    mod = make_module(case, seed=0).to(device="cuda", dtype=torch.bfloat16)
    inputs = make_inputs(case, "cuda", torch.bfloat16, seed=1, fully_masked=False)
    tensors = list(mod.parameters())
    for t in inputs[:-1]:
        t.requires_grad_(True)
        tensors.append(t)
    step = training_step(lambda: mod(*inputs))

    def run():
        for t in tensors:
            t.grad = None
        step()

    for _ in range(5):
        run()
    torch.cuda.synchronize()
    reading = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median", grad_to_none=tensors)
    host = []
    for _ in range(5):
        torch.cuda._sleep(200_000_000)
        start = time.perf_counter()
        for _ in range(20):
            run()
        host.append((time.perf_counter() - start) / 20 * 1e6)
        torch.cuda.synchronize()
    x = torch.zeros(1, device="cuda")
    start = time.perf_counter()
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    add = (time.perf_counter() - start) / 1000 * 1e6
    reading2 = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median", grad_to_none=tensors)
    with open("/proc/self/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    with open("/proc/self/status") as f:
        threads = next(line.split()[1] for line in f if line.startswith("Threads"))
    return {"do_bench": reading, "do_bench_after": reading2, "host_us": statistics.median(host), "add_us": add,
            "cpu": cpu, "threads": threads, "py_threads": threading.active_count(),
            "affinity": len(os.sched_getaffinity(0))}


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        print(json.dumps(worker()))
        sys.exit(0)
    print("process: do_bench ms (bench's), host us a step, x.add_ us, do_bench again, cpu, threads (OS / Python), affinity")
    for k in range(int(sys.argv[1]) if sys.argv[1:] else 6):
        out = subprocess.run([sys.executable, __file__, "--worker"], capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-1500:])
            sys.exit(1)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  {k}: {r['do_bench']:.3f}  host {r['host_us']:6.0f}  x.add_ {r['add_us']:5.1f}  again "
              f"{r['do_bench_after']:.3f}  cpu {r['cpu']:3d}  threads {r['threads']}/{r['py_threads']}  "
              f"affinity {r['affinity']}", flush=True)
