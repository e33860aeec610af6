#include "dicom/j2k.h"

#include "core/check.h"

#include <openjpeg.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace ranzcr::detail {
namespace {

// A read-only memory stream for OpenJPEG's decoder, or a growing buffer for its encoder.
struct Memory {
  const unsigned char* data = nullptr;
  size_t size = 0, at = 0;
  std::vector<unsigned char>* sink = nullptr;
};

OPJ_SIZE_T read_memory(void* buffer, OPJ_SIZE_T n, void* user) {
  auto* m = static_cast<Memory*>(user);
  if (m->at >= m->size) return static_cast<OPJ_SIZE_T>(-1);
  n = std::min<OPJ_SIZE_T>(n, m->size - m->at);
  std::memcpy(buffer, m->data + m->at, n);
  m->at += n;
  return n;
}

OPJ_SIZE_T write_memory(void* buffer, OPJ_SIZE_T n, void* user) {
  auto* m = static_cast<Memory*>(user);
  if (m->sink->size() < m->at + n) m->sink->resize(m->at + n);
  std::memcpy(m->sink->data() + m->at, buffer, n);
  m->at += n;
  return n;
}

OPJ_OFF_T skip_memory(OPJ_OFF_T n, void* user) {
  auto* m = static_cast<Memory*>(user);
  const size_t limit = m->sink ? m->sink->size() : m->size;
  if (n < 0) {
    const auto back = std::min<size_t>(static_cast<size_t>(-n), m->at);
    m->at -= back;
    return -static_cast<OPJ_OFF_T>(back);
  }
  if (m->sink) {  // the encoder skips forward over what it writes later
    m->at += static_cast<size_t>(n);
    return n;
  }
  const auto ahead = std::min<size_t>(static_cast<size_t>(n), limit - std::min(limit, m->at));
  m->at += ahead;
  return static_cast<OPJ_OFF_T>(ahead);
}

OPJ_BOOL seek_memory(OPJ_OFF_T to, void* user) {
  auto* m = static_cast<Memory*>(user);
  if (to < 0 || (!m->sink && static_cast<size_t>(to) > m->size)) return OPJ_FALSE;
  m->at = static_cast<size_t>(to);
  return OPJ_TRUE;
}

// OpenJPEG's messages go here, not to stderr: the last error becomes our message.
void keep_error(const char* msg, void* user) {
  std::string text = msg ? msg : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  *static_cast<std::string*>(user) = text;
}
void ignore_message(const char*, void*) {}

struct CodecDeleter {
  void operator()(opj_codec_t* c) const { opj_destroy_codec(c); }
};
struct StreamDeleter {
  void operator()(opj_stream_t* s) const { opj_stream_destroy(s); }
};
struct ImageDeleter {
  void operator()(opj_image_t* i) const { opj_image_destroy(i); }
};
using Codec = std::unique_ptr<opj_codec_t, CodecDeleter>;
using Stream = std::unique_ptr<opj_stream_t, StreamDeleter>;
using Image = std::unique_ptr<opj_image_t, ImageDeleter>;

Stream memory_stream(Memory* m, bool input) {
  Stream s(opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, input ? OPJ_TRUE : OPJ_FALSE));
  if (!s) return s;
  opj_stream_set_user_data(s.get(), m, nullptr);
  if (input) {
    opj_stream_set_user_data_length(s.get(), m->size);
    opj_stream_set_read_function(s.get(), read_memory);
  } else {
    opj_stream_set_write_function(s.get(), write_memory);
  }
  opj_stream_set_skip_function(s.get(), skip_memory);
  opj_stream_set_seek_function(s.get(), seek_memory);
  return s;
}

std::string with_detail(const std::string& what, const std::string& error) {
  return error.empty() ? what : what + " (" + error + ")";
}

}  // namespace

std::string decode_j2k(const unsigned char* stream, size_t size, int cols, int rows, int bits_allocated,
                       std::vector<unsigned char>* out) {
  static const unsigned char kJp2[] = {0, 0, 0, 0x0c, 'j', 'P', ' ', ' '};
  const bool jp2 = size >= sizeof kJp2 && std::memcmp(stream, kJp2, sizeof kJp2) == 0;
  Codec codec(opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K));
  std::string error;
  opj_set_error_handler(codec.get(), keep_error, &error);
  opj_set_warning_handler(codec.get(), ignore_message, nullptr);
  opj_set_info_handler(codec.get(), ignore_message, nullptr);
  opj_dparameters_t parameters;
  opj_set_default_decoder_parameters(&parameters);
  if (!opj_setup_decoder(codec.get(), &parameters))
    return with_detail("its JPEG 2000 decoder cannot start", error);
  Memory memory{stream, size, 0, nullptr};
  Stream in = memory_stream(&memory, true);
  opj_image_t* raw = nullptr;
  if (!in || !opj_read_header(in.get(), codec.get(), &raw))
    return with_detail("its JPEG 2000 stream has no valid header", error);
  Image image(raw);
  // From the stream's header, before its image is allocated: one component of the header's size.
  if (image->numcomps != 1)
    return "its JPEG 2000 stream has " + std::to_string(image->numcomps) + " components, expected 1";
  const auto width = static_cast<int64_t>(image->x1) - image->x0,
             height = static_cast<int64_t>(image->y1) - image->y0;
  if (width != cols || height != rows || image->comps[0].dx != 1 || image->comps[0].dy != 1)
    return "its JPEG 2000 stream is " + std::to_string(width) + " x " + std::to_string(height) +
           " pixels, the header declares " + std::to_string(cols) + " x " + std::to_string(rows) +
           ", expected the same size";
  const int precision = static_cast<int>(image->comps[0].prec);
  if (precision < 1 || precision > bits_allocated)
    return "its JPEG 2000 stream has " + std::to_string(precision) + "-bit samples in " +
           std::to_string(bits_allocated) + " bits allocated";
  if (!opj_decode(codec.get(), in.get(), image.get()) || !opj_end_decompress(codec.get(), in.get()))
    return with_detail("its JPEG 2000 stream cannot be decoded (corrupt or truncated)", error);
  const opj_image_comp_t& c = image->comps[0];
  if (!c.data || c.w != static_cast<OPJ_UINT32>(cols) || c.h != static_cast<OPJ_UINT32>(rows))
    return "its JPEG 2000 stream decoded to another size than the header's";
  const size_t count = static_cast<size_t>(cols) * rows, bytes = static_cast<size_t>(bits_allocated / 8);
  out->assign(count * bytes, 0);
  for (size_t i = 0; i < count; ++i) {
    const auto v = static_cast<uint32_t>(c.data[i]);  // two's complement for signed samples
    (*out)[i * bytes] = static_cast<unsigned char>(v & 0xff);
    if (bytes == 2) (*out)[i * bytes + 1] = static_cast<unsigned char>((v >> 8) & 0xff);
  }
  return {};
}

std::vector<unsigned char> encode_j2k_lossless(const uint16_t* samples, int cols, int rows, int bits_stored,
                                               bool is_signed) {
  opj_image_cmptparm_t component{};
  component.dx = component.dy = 1;
  component.w = static_cast<OPJ_UINT32>(cols);
  component.h = static_cast<OPJ_UINT32>(rows);
  component.prec = static_cast<OPJ_UINT32>(bits_stored);
  component.sgnd = is_signed ? 1 : 0;
  Image image(opj_image_create(1, &component, OPJ_CLRSPC_GRAY));
  RANZCR_CHECK(image, "OpenJPEG cannot create an image");
  image->x1 = static_cast<OPJ_UINT32>(cols);
  image->y1 = static_cast<OPJ_UINT32>(rows);
  const size_t count = static_cast<size_t>(cols) * rows;
  for (size_t i = 0; i < count; ++i)
    image->comps[0].data[i] = is_signed ? static_cast<int16_t>(samples[i]) : samples[i];
  opj_cparameters_t parameters;
  opj_set_default_encoder_parameters(&parameters);
  parameters.irreversible = 0;  // the 5/3 wavelet: lossless
  parameters.tcp_numlayers = 1;
  parameters.tcp_rates[0] = 0;  // no rate limit
  parameters.cp_disto_alloc = 1;
  // Resolution levels: OpenJPEG's 6 by default, fewer for a small image (each level halves it).
  int levels = 1;
  while (levels < 6 && (std::min(cols, rows) >> levels) >= 1) ++levels;
  parameters.numresolution = levels;
  Codec codec(opj_create_compress(OPJ_CODEC_J2K));
  std::string error;
  opj_set_error_handler(codec.get(), keep_error, &error);
  opj_set_warning_handler(codec.get(), ignore_message, nullptr);
  opj_set_info_handler(codec.get(), ignore_message, nullptr);
  std::vector<unsigned char> out;
  Memory memory{nullptr, 0, 0, &out};
  Stream stream = memory_stream(&memory, false);
  if (!opj_setup_encoder(codec.get(), &parameters, image.get()) ||
      !opj_start_compress(codec.get(), image.get(), stream.get()) || !opj_encode(codec.get(), stream.get()) ||
      !opj_end_compress(codec.get(), stream.get()))
    RANZCR_FAIL(with_detail("OpenJPEG cannot encode the image", error));
  stream.reset();  // flushes
  return out;
}

}  // namespace ranzcr::detail
