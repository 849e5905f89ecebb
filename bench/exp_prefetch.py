import sys, time, threading, torch, sluice
dev = torch.device("cuda", 0)
base = torch.rand(3, 224, 224)
pool = [base.unsqueeze(0) + (torch.arange(64) + 64 * k).float().view(-1, 1, 1, 1) for k in range(4)]
def gen(n):
    for k in range(n):
        yield pool[k % 4]
def run(tag, n=200, **kw):
    it = iter(sluice.Prefetcher(gen(n + 1), **kw))
    next(it); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for k, b in enumerate(it):
        b[:1, 0, 0, :1].sum()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"{tag:30} {n / dt:7.1f} batches/s {n * 38.5e-3 / dt:6.2f} GB/s", flush=True)
run("default")
run("ahead 4", ahead=4)
run("threads 8", threads=8)
sys.setswitchinterval(0.0001)
run("switch 0.1 ms")
sys.setswitchinterval(0.005)
# producer alone: put without a consumer loop doing torch work
core = sluice._sluice._Prefetcher(0, 2, 2, 0, int(sys.argv[1]) if len(sys.argv) > 1 else 2)
pieces = [[(t.data_ptr(), t.numel() * 4, False)] for t in pool]
def prod():
    for k in range(201):
        core.put(pieces[k % 4], None)
    core.close()
th = threading.Thread(target=prod); th.start()
s = torch.cuda.current_stream().cuda_stream
core.take(s); torch.cuda.synchronize(); t0 = time.perf_counter(); n = 0
while core.take(s) is not None:
    n += 1
torch.cuda.synchronize(); dt = time.perf_counter() - t0
print(f"{'raw core, no torch work':30} {n / dt:7.1f} batches/s {n * 38.5e-3 / dt:6.2f} GB/s")
th.join()
# staging alone: torch copy_ into pinned
pinned = torch.empty_like(pool[0]).pin_memory()
t0 = time.perf_counter()
for k in range(100): pinned.copy_(pool[k % 4])
print("torch copy_ to pinned GB/s", 100 * 38.5e-3 / (time.perf_counter() - t0))
