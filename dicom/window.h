// data.dicom.window's values: how a DICOM image's stored values become [0, 1]. Here, below data/, because
// the decoder helper (dicom/) and the loader's options (data/data_config.h) both name them.
#pragma once

namespace ranzcr {

/// How a DICOM image's stored values become [0, 1] (data.dicom.window): the file's VOI LUT or first
/// window (min..max when it has neither), the image's min..max, or its 1st..99th percentile.
enum class DicomWindow { kFile, kMinMax, kPercentile };

}  // namespace ranzcr
