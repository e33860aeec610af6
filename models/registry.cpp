#include "models/registry.h"

#include <map>

#include "core/check.h"
#include "core/text.h"

namespace ranzcr {
namespace {

const std::map<std::string, ModelFactory>& registry() {
  static const std::map<std::string, ModelFactory> r = [] {
    std::map<std::string, ModelFactory> m;
    for (const char* n : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet18d",
                          "resnet34d", "resnet50d", "resnet101d", "resnet152d", "resnet200d"})
      m[n] = [name = std::string(n)](const ModelSpec& s) { return make_resnet(name, s); };
    for (int b = 0; b <= 7; ++b) {
      const std::string name = "efficientnet_b" + std::to_string(b);
      m[name] = [name](const ModelSpec& s) { return make_efficientnet(name, s); };
    }
    m["tiny_cnn"] = [](const ModelSpec& s) { return make_tiny_cnn(s); };
    return m;
  }();
  return r;
}

}  // namespace

ClassifierOutput Classifier::forward_with_features(torch::Tensor) {
  RANZCR_FAIL("model '", name(), "' has no feature map for an auxiliary head");
}

int64_t Classifier::feature_channels() const {
  RANZCR_FAIL("model '", name(), "' has no feature map for an auxiliary head");
}

std::shared_ptr<Classifier> create_model(const std::string& name, const ModelSpec& spec) {
  const auto& r = registry();
  auto it = r.find(name);
  if (it == r.end()) {
    RANZCR_FAIL("unknown model name '", name, "' (valid: ", join(model_names(), ", "), ")");
  }
  return it->second(spec);
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) n += p.numel();
  return n;
}

}  // namespace ranzcr
