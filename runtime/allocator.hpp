#pragma once

// glibc's allocator and the runtime's large, short-lived buffers. By
// default glibc maps blocks above its mmap threshold (128 KiB at first)
// fresh from the kernel and unmaps them at free, and trims the heap's top
// beyond 128 KiB, so a buffer of a few MiB allocated per step or per
// message costs a page fault and a zero fill per 4 KiB every time. Two
// such buffers matter here:
// - a gradient push of 16 MiB that comes in 1 MiB parts holds one buffer
//   per part until it is whole (bench_net: 27-29 % of raw TCP, 57-65 %
//   with the memory kept);
// - a K-FAC inversion works on double copies of 785² factors (4.9 MB
//   each): with the memory kept an inversion set took about half the wall
//   time (0.45 s against 0.80 s per 150 steps of the ConvNet).
// (docs/benchmarks-history.md, "Network" and the K-FAC section.)

namespace syncfac {

/// Blocks below 32 MiB (glibc's largest mmap threshold on 64-bit) come
/// from the heap, and up to 128 MiB freed at its top stay with the process
/// for the next ones. The programs call it first thing in main; a program
/// embedding the runtime may too. False if glibc refused a setting.
bool keep_freed_memory();

} // namespace syncfac
