// train --resume PATH / train.resume: auto: the checkpoint's meta read and checked, then the model, the EMA
// weights, the optimizer (AdamW) state and the random generator states restored, as Trainer::resume does.
// The model is a 2 -> 3 linear layer whatever the checkpoint names, as in the seeds (fuzz_write_seeds):
// a real model's checkpoint is megabytes, too large to fuzz; restoring is the same code for any module.
#include <torch/optim/adamw.h>

#include "engine/io/checkpoint.h"
#include "engine/runtime/random_state.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/micro_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string path = fuzz::write_input("last.pt", data, size);
  fuzz::expect_read_or_refused(
      [&] {
        CheckpointReader reader(path, torch::kCPU);
        const CheckpointMeta& meta = reader.meta();
        fuzz::MicroModel model, ema;
        torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(1e-3));
        reader.restore(model, nullptr);
        if (reader.has_ema()) reader.restore_ema(ema);
        reader.restore_optimizer(optimizer);
        // Trainer::restore_meta and fitting_rng_state: rank 0's state when the run's shape is the same.
        if (meta.epoch_batches_done > 0 && meta.rng_states.defined() &&
            meta.rng_states.size(0) == meta.world_size) {
          const torch::Tensor state = meta.rng_states[0];
          if (state.numel() == generator_state(torch::kCPU).numel()) set_generator_state(torch::kCPU, state);
        }
      },
      path);
  return 0;
}
