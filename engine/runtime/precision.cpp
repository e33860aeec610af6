#include "engine/runtime/precision.h"

#include <ATen/autocast_mode.h>
#include <c10/core/MemoryFormat.h>
#include <c10/util/strides.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/check.h"
#include "engine/config/config.h"
#include "engine/runtime/cuda_support.h"

namespace ranzcr {

Precision resolve_precision(PrecisionSetting setting, const torch::Device& device) {
  const bool gpu_bf16 = device.is_cuda() && cuda::bf16_supported(device);
  switch (setting) {
    case PrecisionSetting::kAuto:
      return gpu_bf16 ? Precision::kBf16 : Precision::kFp32;
    case PrecisionSetting::kFp16:
      return Precision::kFp16;
    case PrecisionSetting::kBf16:
      RANZCR_CHECK(!device.is_cuda() || gpu_bf16, "train.precision bf16: GPU ", device.str(),
                   " has no bf16 support (compute capability < 8.0); use fp16 or auto");
      return Precision::kBf16;
    case PrecisionSetting::kFp32:
      break;
  }
  return Precision::kFp32;
}

std::string precision_name(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    default:
      return "fp32";
  }
}

bool cpu_has_native_bf16() {
  static const bool has = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      std::istringstream flags(line.substr(line.find(':') + 1));
      std::string flag;
      while (flags >> flag)
        if (flag == "avx512_bf16" || flag == "amx_bf16") return true;
      return false;  // the first processor's flags
    }
    return false;
  }();
  return has;
}

std::string cpu_bf16_warning(Precision precision, const torch::Device& device) {
  if (precision != Precision::kBf16 || !device.is_cpu() || cpu_has_native_bf16()) return "";
  return "train.precision bf16 on a CPU without AMX or AVX-512 BF16: LibTorch emulates bf16 here, "
         "slower than fp32 (see docs/benchmarks.md); expected fp32 or auto on this CPU";
}

bool resolve_on_for_cuda(OnOffAuto setting, const torch::Device& device) {
  return setting == OnOffAuto::kAuto ? device.is_cuda() : setting == OnOffAuto::kTrue;
}

bool resolve_channels_last(OnOffAuto setting, const torch::Device& device) {
  return resolve_on_for_cuda(setting, device);
}

torch::Tensor in_memory_format(const torch::Tensor& t, torch::MemoryFormat format) {
  if (t.dim() != 4) return t;
  if (!t.is_contiguous(format)) return t.contiguous(format);
  if (t.suggest_memory_format() == format) return t;
  std::vector<int64_t> strides;
  if (format == torch::MemoryFormat::ChannelsLast) {
    strides = c10::get_channels_last_strides_2d(t.sizes());
  } else {
    const auto contiguous = c10::contiguous_strides(t.sizes());
    strides.assign(contiguous.begin(), contiguous.end());
  }
  return t.as_strided(t.sizes(), strides, t.storage_offset());
}

void set_memory_format(torch::nn::Module& module, bool channels_last) {
  const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  torch::NoGradGuard no_grad;
  auto convert = [&](torch::Tensor t) {
    const torch::Tensor laid_out = in_memory_format(t.detach(), format);
    if (!laid_out.strides().equals(t.strides())) t.set_data(laid_out);
  };
  for (auto& p : module.parameters()) convert(p);
  for (auto& b : module.buffers()) convert(b);
}

Autocast::Autocast(const torch::Device& device, Precision precision) {
  if (precision == Precision::kFp32) return;
  active_ = true;
  device_type_ = device.type();
  was_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_,
                                   precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat16);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();  // cached casts of weights
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

}  // namespace ranzcr
