// Thread count of the CPU backend: its kernels and its GEMMs (single-threaded BLAS calls split
// over the project's pool) share it.
#pragma once

namespace mg::cpu {

// Caps the threads CPU kernels and BLAS use (1 .. the pool's size, which is the number of
// hardware threads); n <= 0 restores the default. Kernels compiled earlier keep the work split
// they were compiled with but run on at most n threads.
void set_num_threads(int n);
int num_threads();  // the current cap
// Off: the CPU runs every composite as its decomposition, even where it has a kernel; tests
// use it to check a composite kernel against its decomposition (the reference).
void set_composite_kernels(bool on);
// Benchmarking the pool: `batches` parallel steps of one task a thread, each task busy for
// work_us; returns the median of each step's time past work_us (hand-out, wake-up, hand-back).
double pool_step_overhead_us(double work_us, int batches);

}  // namespace mg::cpu
