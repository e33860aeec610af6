// The numeric precision and memory layout of training and inference: autocast (bf16/fp16), channels_last.
// The device, and process-wide kernel settings for it: placement.h.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>

#include "engine/config/config.h"

namespace ranzcr {

enum class Precision { kFp32, kBf16, kFp16 };

/// train.precision for `device`: auto is bf16 on a GPU that has bf16 tensor cores, else fp32 (so always
/// fp32 on a CPU). Throws for bf16 asked on a GPU without it.
Precision resolve_precision(PrecisionSetting setting, const torch::Device& device);
std::string precision_name(Precision precision);
/// Whether this CPU computes bf16 natively (AMX or AVX-512 BF16, from /proc/cpuinfo's flags). Without it
/// LibTorch emulates bf16 with fp32 instructions plus conversions: slower than fp32.
bool cpu_has_native_bf16();
/// "" or one warning line: bf16 asked for on a CPU that would emulate it.
std::string cpu_bf16_warning(Precision precision, const torch::Device& device);

/// An auto | true | false setting whose auto means on for CUDA devices, off on CPUs (train.channels_last,
/// optim.fused).
bool resolve_on_for_cuda(OnOffAuto setting, const torch::Device& device);

/// train.channels_last: auto is on for CUDA devices (conv nets run faster in NHWC with cuDNN), off on CPUs.
bool resolve_channels_last(OnOffAuto setting, const torch::Device& device);

/// `t` (4-d) laid out so that its suggested memory format, the one cuDNN, oneDNN and the pooling kernels
/// choose their layout from, is `format`; other tensors as they are. `t.contiguous(format)` is not enough:
/// a tensor with one channel or a 1x1 spatial size ([64,1,7,7], [O,I,1,1], [N,1,H,W]) is already
/// "contiguous" in both formats, and its NCHW strides make the convolution it enters run NCHW. Such a tensor
/// gets the format's strides without a copy (its elements are in the same order); any other is copied.
/// Python's `Tensor.to(memory_format=...)` decides the same way (by the suggested format).
torch::Tensor in_memory_format(const torch::Tensor& t, torch::MemoryFormat format);

/// Puts every 4-d parameter and buffer of `module` in channels_last (NHWC) or back to contiguous
/// (in_memory_format), like `module.to(memory_format=...)`.
void set_memory_format(torch::nn::Module& module, bool channels_last);

/// Autocast for the guard's lifetime (torch.autocast(device_type, dtype)): matmuls and convolutions run
/// in bf16/fp16, numerically sensitive ops stay fp32. A no-op for fp32.
class Autocast {
 public:
  Autocast(const torch::Device& device, Precision precision);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Float;
};

}  // namespace ranzcr
