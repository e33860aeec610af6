// The default random generator of a device (CPU or the current GPU), read and set as a state tensor:
// saved in mid-epoch checkpoints, restored on resume, kept aside while something draws numbers that
// must not move the run's stream.
#pragma once

#include <torch/types.h>

namespace ranzcr {

/// The state of `device`'s default generator (uint8 on the CPU).
torch::Tensor generator_state(const torch::Device& device);

/// Sets `device`'s default generator to `state` (one of generator_state's for the same device type).
void set_generator_state(const torch::Device& device, const torch::Tensor& state);

}  // namespace ranzcr
