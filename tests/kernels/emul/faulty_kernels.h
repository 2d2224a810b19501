// Launchers of kernels with planted faults (faulty_kernels.cc): 64 threads a block unless said.
#pragma once

namespace kiln::emul::faulty {

void missed_barrier(float* out, int split);  // threads < split reach a __syncthreads
void early_exit(float* out);                 // half the block returns before a barrier
void divergent_barriers(float* out);         // odd and even threads at different barriers
void neighbour(float* out,
               bool sync);   // updates its slot, reads the neighbour's (races without sync)
void overwrite(float* out);  // overwrites its slot after a neighbour read it
void shared_index(float* out, int shift);           // reads shared slot threadIdx + shift (of 64)
void global_index(float* out, int shift);           // writes out[threadIdx + shift]
void uninitialized(float* out);                     // reads a shared slot no thread wrote
void float2_store(float* out, int offset);          // float2 stores from out + offset
void blocks_write_one_row(float* out, int blocks);  // every block writes out[0, 64)
void shuffle_after_exit(float* out);                // half of each warp exits, the rest shuffles
void warp_sum(float* out, int threads);             // a full-mask butterfly in a block of `threads`
// Writes used_bytes of dynamic shared memory in a launch of launch_bytes.
void dynamic_shared(float* out, int launch_bytes, int used_bytes, bool set_attribute);
void atomic_min(int* out);  // every thread atomicMin into one shared int

}  // namespace kiln::emul::faulty
