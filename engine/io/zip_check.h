// A structural check of torch zip archives (torch.save, torch.jit.save, torch::save) that runs before
// LibTorch's reader sees a file. caffe2::serialize::PyTorchStreamReader (over miniz) trusts the sizes an
// archive declares, and when its constructor throws after mz_zip_reader_init it never calls
// mz_zip_reader_end, so every malformed archive it rejects leaks the central directory it read. These
// checks refuse such archives first, with one line, reading only what the file really holds: LibTorch
// then only ever opens archives whose structure it accepts.
#pragma once

#include <string>

namespace ranzcr {

/// Checks that `bytes` (the whole file; `what` names it in errors) is a zip archive that LibTorch's
/// PyTorchStreamReader will open without throwing: an end of central directory record (zip64 too) on a
/// single disk, a central directory inside the file whose entries are stored (method 0) or deflated (8,
/// as torch.jit.save writes code; at most 1032:1), unencrypted, with local headers and data inside the
/// file; every name inside the folder of the first entry ("archive/..."); and a stored version record
/// ("<folder>/.data/version" or "<folder>/version") holding a number in the range of file format
/// versions LibTorch reads. CRCs and deflate streams are not checked (LibTorch checks neither on
/// opening; a bad stream fails the read of that record, after the reader is built). Throws
/// std::runtime_error with ONE line "<what>: not a valid torch archive (<why>)" otherwise. Allocates
/// nothing proportional to sizes declared in the file (only to the file's real size / number of entries
/// actually present).
void check_torch_zip(const std::string& bytes, const std::string& what);

/// Same, reading `path` (its errors name `path`): only its end records, central directory, local headers
/// and version record, with seeks. A missing/unreadable file is "cannot open PATH".
void check_torch_zip_file(const std::string& path);

/// The problem check_torch_zip_file finds with `path` without the path in front ("not a valid torch archive
/// (...)", "cannot open PATH"), or "" when there is none: for callers that phrase the error themselves.
std::string torch_zip_problem(const std::string& path);

}  // namespace ranzcr
