// The model of the checkpoint fuzz seeds: a 2 -> 3 linear layer, written by fuzz/write_seeds.cpp and
// restored by fuzz/targets/checkpoint_resume.cpp (a real model's checkpoint is megabytes, too large to fuzz).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

namespace ranzcr::fuzz {

struct MicroModel : torch::nn::Module {
  MicroModel() { fc = register_module("fc", torch::nn::Linear(2, 3)); }
  torch::nn::Linear fc{nullptr};
};

}  // namespace ranzcr::fuzz
