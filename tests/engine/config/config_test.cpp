#include "engine/config/config.h"

#include <yaml-cpp/yaml.h>

#include "engine/runtime/placement.h"

#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(yaml, "cfg.yaml", sets);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsAndValues) {
  const Config c = parse_config("seed: 3\ntrain:\n  epochs: 2\ndata:\n  augment:\n    clahe: true\n", "x");
  EXPECT_EQ(c.seed, 3);
  EXPECT_EQ(c.train.epochs, 2);
  EXPECT_TRUE(c.data.augment.clahe);
  EXPECT_EQ(c.train.batch_size, TrainConfig{}.batch_size);
  EXPECT_EQ(parse_config("", "empty").model.name, ModelConfig{}.name);
}

TEST(Config, UnknownKeyNamesTheKeyAndLine) {
  const std::string e = error_of("seed: 1\ntrain:\n  epochs: 2\n  epoch: 3\n");
  EXPECT_NE(e.find("unknown config key 'train.epoch' at cfg.yaml:4"), std::string::npos) << e;
  EXPECT_NE(e.find("train.epochs"), std::string::npos) << e;  // lists the valid keys of the section
  EXPECT_NE(error_of("trian:\n  epochs: 2\n").find("unknown config key 'trian' at cfg.yaml:1"),
            std::string::npos);
  EXPECT_NE(error_of("train: 3\n").find("'train' at cfg.yaml:1: expected a section"), std::string::npos);
}

TEST(Config, ControlCharactersInStringsAreRefused) {
  // A carriage return before the line's end would not survive the run folder's config.yaml.
  const std::string e = error_of("data:\n  root: \"ds\\r\"\n");
  EXPECT_EQ(
      e, "config key 'data.root' at cfg.yaml:2: holds a control character (\\x0d), expected printable text");
  EXPECT_NE(error_of("model:\n  name: \"a\\tb\"\n")
                .find("'model.name' at cfg.yaml:2: holds a control character (\\x09)"),
            std::string::npos);
  EXPECT_NE(error_of("", {"data.root=\"x\\ny\""}).find("holds a control character (\\x0a)"),
            std::string::npos);
  EXPECT_EQ(parse_config("data:\n  root: \"datasets/é x\"\n", "x").data.root, "datasets/é x");
}

TEST(Config, WrongTypeNamesTheKeyLineAndExpectation) {
  const std::string e = error_of("train:\n  epochs: many\n");
  EXPECT_NE(e.find("config key 'train.epochs' at cfg.yaml:2: expected an integer, got 'many'"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of("train:\n  epochs: 2.5\n").find("expected an integer"), std::string::npos);
  EXPECT_NE(error_of("data:\n  augment:\n    hflip: maybe\n").find("expected a boolean"), std::string::npos);
  EXPECT_NE(error_of("data:\n  label_columns: a\n").find("expected a list of strings"), std::string::npos);
  EXPECT_NE(error_of("optim:\n  lr: [1]\n").find("expected a number, got a list"), std::string::npos);
  EXPECT_NE(error_of("optim:\n  name: adam\n").find("optim.name must be adamw or sgd"), std::string::npos);
  EXPECT_NE(error_of("optim:\n  fused: yes please\n")
                .find("optim.fused must be auto, true or false, got 'yes please'"),
            std::string::npos);
  EXPECT_NE(error_of("train: {epochs: 0}\n").find("train.epochs must be at least 1"), std::string::npos);
  EXPECT_NE(error_of("train: {precision: fp8}\n")
                .find("train.precision must be auto, fp32, bf16 or fp16, got 'fp8'"),
            std::string::npos);
  EXPECT_NE(error_of("train: {channels_last: yes}\n").find("train.channels_last must be auto, true or false"),
            std::string::npos);
  EXPECT_NE(error_of("data: {dicom: {window: auto}}\n")
                .find("data.dicom.window must be file, minmax or percentile, got 'auto'"),
            std::string::npos);
  EXPECT_EQ(parse_config("data: {dicom: {window: percentile}}\n", "x").data.dicom.window,
            DicomWindow::kPercentile);
  EXPECT_EQ(parse_config("synth: {format: dcm}\n", "x").synth.format, SynthFormat::kDicom);
}

// train.device: auto | cpu | cuda | cuda:N; anything else is an error naming the key and what is valid.
TEST(Config, DeviceSetting) {
  EXPECT_EQ(setting_text(parse_config("", "x").train.device), "auto");
  for (const char* ok : {"auto", "cpu", "cuda", "cuda:0", "cuda:7"}) {
    const Config c = parse_config("", "x", {std::string("train.device=") + ok});
    EXPECT_EQ(setting_text(c.train.device), ok);
    EXPECT_EQ(setting_text(parse_config(config_to_yaml(c), "back").train.device),
              ok);  // written back the same
  }
  EXPECT_EQ(parse_device_setting("cuda:3").kind, DeviceSetting::Kind::kCuda);
  EXPECT_EQ(parse_device_setting("cuda:3").index, 3);
  EXPECT_EQ(parse_device_setting("cuda").index, -1);
  EXPECT_EQ(parse_device_setting("cpu").kind, DeviceSetting::Kind::kCpu);
  EXPECT_EQ(parse_device_setting("auto").kind, DeviceSetting::Kind::kAuto);
  for (const char* bad : {"gpu", "cuda:x", "cuda:-1", "CPU", "cuda:1.5", "0"}) {
    const std::string e = error_of("", {std::string("train.device=") + bad});
    EXPECT_NE(e.find("train.device must be auto, cpu, cuda or cuda:N"), std::string::npos)
        << bad << ": " << e;
    EXPECT_NE(e.find(std::string("got '") + bad + "'"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("(--set train.device="), std::string::npos) << bad << ": " << e;  // where it was set
  }
  EXPECT_NE(error_of("train:\n  device: gpu\n").find("train.device must be"), std::string::npos);
  EXPECT_NE(error_of("", {"train.device=cpu", "distributed.backend=nccl"})
                .find("distributed.backend nccl needs GPUs, but train.device is cpu"),
            std::string::npos);
}

// distributed.nproc_per_node (N or auto) and distributed.init_method (env://, tcp://host:port, file:///path)
// are typed when the config is read: bad values are config errors naming the key and where it was set.
TEST(Config, ProcessCountAndInitMethod) {
  EXPECT_EQ(parse_config("", "x").distributed.nproc_per_node, (ProcessCount{false, 1}));
  EXPECT_EQ(parse_config("", "x", {"distributed.nproc_per_node=4"}).distributed.nproc_per_node,
            (ProcessCount{false, 4}));
  for (const char* bad : {"0", "-1", "x", "1.5", "99999"}) {
    const std::string e = error_of("", {std::string("distributed.nproc_per_node=") + bad});
    EXPECT_NE(e.find("distributed.nproc_per_node must be a positive integer or auto"), std::string::npos)
        << e;
  }
  const InitMethod tcp =
      parse_config("", "x", {"distributed.init_method=tcp://10.0.0.1:29400"}).distributed.init_method;
  EXPECT_EQ(tcp.kind, InitMethod::Kind::kTcp);
  EXPECT_EQ(tcp.host, "10.0.0.1");
  EXPECT_EQ(tcp.port, 29400);
  const Config file = parse_config("", "x", {"distributed.init_method=file:///shared/store"});
  EXPECT_EQ(file.distributed.init_method.kind, InitMethod::Kind::kFile);
  EXPECT_EQ(file.distributed.init_method.path, "/shared/store");
  EXPECT_EQ(setting_text(parse_config(config_to_yaml(file), "back").distributed.init_method),
            "file:///shared/store");
  const Config v6 = parse_config("", "x", {"distributed.init_method=tcp://[::1]:29500"});
  EXPECT_EQ(v6.distributed.init_method.host, "::1");  // as getaddrinfo takes it
  EXPECT_EQ(setting_text(parse_config(config_to_yaml(v6), "back").distributed.init_method),
            "tcp://[::1]:29500");
  EXPECT_NE(error_of("", {"train.device=\"cuda\\x01\""}).find("holds a control character"),
            std::string::npos);
  EXPECT_EQ(parse_config("", "x", {"distributed.init_method=env"}).distributed.init_method.kind,
            InitMethod::Kind::kEnv);
  for (const char* bad :
       {"tcp://host", "tcp://host:0", "tcp://host:70000", "tcp://:29500", "http://x:1", "file://"}) {
    const std::string e = error_of("", {std::string("distributed.init_method=") + bad});
    EXPECT_NE(e.find(std::string("distributed.init_method '") + bad + "': expected"), std::string::npos) << e;
    EXPECT_NE(e.find("(--set distributed.init_method="), std::string::npos) << e;
  }
}

// The device a rank gets for train.device, given the GPUs it sees (resolve_device is pure: no GPU needed).
TEST(Config, DeviceResolution) {
  // resolve_device(setting, local_rank, local_world_size, visible_gpus, own_gpus)
  const auto resolve_device = [](const std::string& setting, int rank, int ranks, int gpus, bool own) {
    return ranzcr::resolve_device(parse_device_setting(setting), rank, ranks, gpus, own);
  };
  EXPECT_EQ(resolve_device("auto", 0, 1, 0, false), torch::Device(torch::kCPU));
  EXPECT_EQ(resolve_device("auto", 1, 2, 2, false), torch::Device(torch::kCUDA, 1));
  EXPECT_EQ(resolve_device("cpu", 0, 1, 8, false), torch::Device(torch::kCPU));
  EXPECT_EQ(resolve_device("cuda", 3, 4, 4, false), torch::Device(torch::kCUDA, 3));
  EXPECT_EQ(resolve_device("cuda", 5, 8, 1, true), torch::Device(torch::kCUDA, 0));  // --gpus-per-task=1
  EXPECT_EQ(resolve_device("cuda:2", 0, 1, 4, false), torch::Device(torch::kCUDA, 2));
  EXPECT_EQ(resolve_device("cuda:0", 3, 8, 1, true), torch::Device(torch::kCUDA, 0));  // each rank its own
  auto error = [&](const std::string& setting, int rank, int ranks, int gpus, bool own) {
    try {
      resolve_device(setting, rank, ranks, gpus, own);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("cuda", 0, 1, 0, false).find("train.device cuda: no CUDA GPU is visible"),
            std::string::npos);
  EXPECT_NE(error("cuda:1", 0, 1, 0, false).find("train.device cuda:1: no CUDA GPU is visible"),
            std::string::npos);
  EXPECT_NE(error("cuda:2", 0, 1, 2, false).find("train.device cuda:2: this process sees 2 GPU(s)"),
            std::string::npos);
  EXPECT_NE(
      error("cuda:0", 0, 2, 4, false).find("train.device cuda:0: the 2 ranks on this node would all use"),
      std::string::npos);
}

TEST(Config, SetOverridesParseTheValueAsYaml) {
  const Config c = parse_config("train:\n  epochs: 2\n", "x",
                                {"train.epochs=5", "data.label_columns=[a, 'b c']", "model.name=resnet50",
                                 "optim.lr=1e-4", "distributed.nproc_per_node=auto"});
  EXPECT_EQ(c.train.epochs, 5);
  EXPECT_EQ(c.data.label_columns, (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(c.model.name, "resnet50");
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-4);
  EXPECT_TRUE(c.distributed.nproc_per_node.automatic);
  EXPECT_NE(
      error_of("", {"train.epochs=x"}).find("'train.epochs' at --set train.epochs=x: expected an integer"),
      std::string::npos);
  EXPECT_NE(error_of("", {"train.epoch=1"}).find("unknown config key 'train.epoch'"), std::string::npos);
  EXPECT_NE(error_of("", {"noequals"}).find("expected key=value"), std::string::npos);
}

TEST(Config, InputNormalisationIsOneOrInChannelsPositiveNumbers) {
  const Config c = parse_config("model:\n  in_channels: 3\n  input_mean: [0.485, 0.456, 0.406]\n", "x",
                                {"model.input_std=[0.226]"});
  EXPECT_EQ(c.model.input_mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(c.model.input_std, (std::vector<double>{0.226}));
  EXPECT_EQ(parse_config(config_to_yaml(c), "resolved").model.input_mean, c.model.input_mean);
  EXPECT_EQ(Config().model.input_mean, (std::vector<double>{0.0}));  // the identity: pixels in [0, 1]
  EXPECT_NE(error_of("model:\n  input_mean: [0.1, 0.2]\n")
                .find("model.input_mean must hold 1 or model.in_channels (1) numbers, got 2"),
            std::string::npos);
  EXPECT_NE(error_of("", {"model.input_std=[0]"}).find("model.input_std must be positive"),
            std::string::npos);
  EXPECT_NE(error_of("", {"model.input_std=0.5"}).find("expected a list of numbers, got '0.5'"),
            std::string::npos);
  EXPECT_NE(error_of("", {"model.input_mean=[a]"}).find("expected a list of numbers"), std::string::npos);
}

TEST(Config, ImageSizesAndAugmentRangesAreChecked) {
  auto has = [](const std::string& error, const std::string& part) {
    return error.find(part) != std::string::npos;
  };
  EXPECT_EQ(error_of("", {"data.augment.scale=0.9", "data.augment.rotate_deg=360", "data.cache_size=16384"}),
            "");
  EXPECT_TRUE(has(error_of("", {"data.augment.scale=.nan"}), "data.augment.scale must be 0 to 0.9"));
  EXPECT_TRUE(has(error_of("", {"data.augment.scale=1.5"}),
                  "data.augment.scale must be 0 to 0.9 (zoom range), got 1.5"));
  EXPECT_TRUE(has(error_of("", {"data.augment.shift=-0.1"}), "data.augment.shift must be 0 to 1"));
  EXPECT_TRUE(
      has(error_of("", {"data.augment.rotate_deg=.inf"}), "data.augment.rotate_deg must be 0 to 360"));
  EXPECT_TRUE(has(error_of("", {"data.augment.brightness=2"}), "data.augment.brightness must be 0 to 1"));
  EXPECT_TRUE(has(error_of("", {"data.augment.contrast=-1"}), "data.augment.contrast must be 0 to 1"));
  EXPECT_TRUE(has(error_of("", {"data.image_size=20000"}), "data.image_size must be 16 to 16384, got 20000"));
  EXPECT_TRUE(has(error_of("", {"data.cache_size=100"}), "data.cache_size must be 0 (automatic) or from"));
  // 16000 * 1.08 rounds up to 17280: too large for a cache unless data.cache_size says otherwise.
  EXPECT_TRUE(has(error_of("", {"data.image_size=16000"}), "prepares images of 17280 px, at most 16384"));
  EXPECT_EQ(error_of("", {"data.image_size=16000", "data.cache_size=16384"}), "");
}

TEST(Config, ResolvedYamlRoundTrips) {
  Config c = parse_config("", "x", {"data.label_columns=[x, y]", "train.epochs=7", "optim.lr=0.0005"});
  const std::string yaml = config_to_yaml(c);
  const Config back = parse_config(yaml, "resolved");
  EXPECT_EQ(config_to_yaml(back), yaml);
  EXPECT_EQ(back.train.epochs, 7);
  EXPECT_EQ(back.data.label_columns, (std::vector<std::string>{"x", "y"}));
}

// The keys the file or --set gave a value (a null value keeps the default and counts as not given): Hub
// weights bring their own normalisation only where the config did not set one.
TEST(Config, RemembersWhichKeysWereGiven) {
  const Config c = parse_config("model:\n  input_mean: [0.5]\n  input_std: ~\n", "t", {"train.epochs=2"});
  EXPECT_EQ(c.explicit_keys, (std::set<std::string>{"model.input_mean", "train.epochs"}));
  EXPECT_EQ(c.model.input_std, (std::vector<double>{1.0}));
  EXPECT_TRUE(parse_config("seed: 1\n", "t").explicit_keys.count("seed"));
  EXPECT_THROW(parse_config("model:\n  pretrained_file: x\n", "t"), std::runtime_error);
}

// model.pretrained is parsed once, when the config is read, into none, a file, timm or a Hub repository at
// a revision, and written back as it was spelled.
TEST(Config, PretrainedIsReadIntoItsKind) {
  using Kind = hub::PretrainedSource::Kind;
  const auto read = [](const std::string& text) {
    return parse_config("model:\n  pretrained: '" + text + "'\n", "t").model.pretrained;
  };
  EXPECT_EQ(Config{}.model.pretrained.kind, Kind::kNone);
  EXPECT_EQ(read("").kind, Kind::kNone);
  EXPECT_EQ(read("timm").kind, Kind::kTimm);
  const hub::PretrainedSource file = read("/w/resnet18.safetensors");
  EXPECT_EQ(file.kind, Kind::kFile);
  EXPECT_EQ(file.file, "/w/resnet18.safetensors");
  const hub::PretrainedSource pinned = read("hf-hub:org/name@v1.0");
  EXPECT_EQ(pinned.kind, Kind::kHub);
  EXPECT_EQ(pinned.repo_id, "org/name");
  EXPECT_EQ(pinned.revision, "v1.0");
  EXPECT_EQ(read("hf-hub:org/name").revision, "");
  for (const std::string text : {"", "timm", "/w/x.pth", "hf-hub:org/name", "hf-hub:org/name@v1.0"}) {
    Config c;
    c.model.pretrained = read(text);
    EXPECT_EQ(parse_config(config_to_yaml(c), "again").model.pretrained, c.model.pretrained) << text;
    EXPECT_EQ(setting_text(c.model.pretrained), text);
  }
  // A malformed Hub reference is one line naming the key, where it was and what was expected.
  for (const std::string bad : {"hf-hub:org/name@", "hf-hub:org--x/name"}) {
    try {
      read(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find("config: model.pretrained: " + bad + ": "), 0u) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

// Every key is documented (present with a comment) in both shipped recipes, and both parse.
TEST(Config, ShippedConfigsListEveryKey) {
  for (const char* name : {"quickstart.yaml", "ranzcr.yaml"}) {
    const std::string path = std::string(test::source_dir()) + "/configs/" + name;
    ASSERT_NO_THROW(load_config(path)) << path;
    const YAML::Node root = YAML::LoadFile(path);
    const std::string text = test::read_file(path);
    for (const auto& key : config_keys()) {
      std::vector<std::string> parts;
      std::stringstream ss(key);
      for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
      std::function<bool(const YAML::Node&, size_t)> has = [&](const YAML::Node& n, size_t i) {
        if (i == parts.size()) return n.IsDefined();
        return n.IsMap() && has(n[parts[i]], i + 1);
      };
      EXPECT_TRUE(has(root, 0)) << key << " missing in " << path;
      const std::string leaf = key.substr(key.rfind('.') + 1);
      std::string line;  // the first line whose first word is `leaf:`
      std::stringstream lines(text);
      for (std::string l; std::getline(lines, l);) {
        const size_t start = l.find_first_not_of(' ');
        if (start != std::string::npos && l.compare(start, leaf.size() + 1, leaf + ":") == 0) {
          line = l;
          break;
        }
      }
      ASSERT_FALSE(line.empty()) << key << " not found in " << path;
      EXPECT_NE(line.find('#'), std::string::npos) << key << " has no comment in " << path;
    }
  }
}

}  // namespace
}  // namespace ranzcr
