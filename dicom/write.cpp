// write_dicom (dicom/write.h) through DCMTK: uncompressed, RLE, JPEG lossless and JPEG-LS by DCMTK's own
// encoders, JPEG 2000 by OpenJPEG (dicom/j2k.h) in DCMTK's encapsulated pixel data.
#include "dicom/write.h"

#include <dcmtk/dcmdata/dcdatset.h>
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcpixel.h>
#include <dcmtk/dcmdata/dcpixseq.h>
#include <dcmtk/dcmdata/dcpxitem.h>
#include <dcmtk/dcmdata/dcrleerg.h>
#include <dcmtk/dcmdata/dcrlerp.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmjpeg/djencode.h>
#include <dcmtk/dcmjpeg/djrplol.h>
#include <dcmtk/dcmjpls/djencode.h>
#include <dcmtk/dcmjpls/djrparam.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/check.h"
#include "dicom/decode.h"  // init_dicom_library
#include "dicom/j2k.h"

namespace ranzcr {

namespace {

void register_encoders() {
  static std::once_flag once;
  std::call_once(once, [] {
    init_dicom_library();
    DcmRLEEncoderRegistration::registerCodecs();
    DJEncoderRegistration::registerCodecs();
    DJLSEncoderRegistration::registerCodecs();
    std::atexit([] {
      DJLSEncoderRegistration::cleanup();
      DJEncoderRegistration::cleanup();
      DcmRLEEncoderRegistration::cleanup();
    });
  });
}

std::string decimal_string(double v) {
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

void put(DcmDataset& ds, const DcmTagKey& tag, const std::string& value, const std::string& path) {
  if (ds.putAndInsertString(tag, value.c_str()).bad())
    RANZCR_FAIL("cannot write DICOM file ", path, ": DCMTK refused the value '", value, "'");
}

void put(DcmDataset& ds, const DcmTagKey& tag, Uint16 value) {
  ds.putAndInsertUint16(tag, value);
}

// The header of a DX "for presentation" image, with fixed dates (the same input gives the same bytes).
void put_header(DcmDataset& ds, const cv::Mat& stored, const DicomWriteOptions& o, const std::string& path) {
  put(ds, DCM_SOPClassUID, UID_DigitalXRayImageStorageForPresentation, path);
  put(ds, DCM_SOPInstanceUID, o.sop_instance_uid, path);
  put(ds, DCM_StudyInstanceUID, o.study_uid, path);
  put(ds, DCM_SeriesInstanceUID, o.study_uid + ".1", path);
  put(ds, DCM_PatientID, o.patient_id, path);
  put(ds, DCM_Modality, "DX", path);
  put(ds, DCM_StudyDate, "20000101", path);
  put(ds, DCM_StudyTime, "000000", path);
  put(ds, DCM_PresentationIntentType, "FOR PRESENTATION", path);
  put(ds, DCM_SamplesPerPixel, 1);
  put(ds, DCM_PhotometricInterpretation, o.monochrome1 ? "MONOCHROME1" : "MONOCHROME2", path);
  put(ds, DCM_Rows, static_cast<Uint16>(stored.rows));
  put(ds, DCM_Columns, static_cast<Uint16>(stored.cols));
  put(ds, DCM_BitsAllocated, 16);
  put(ds, DCM_BitsStored, static_cast<Uint16>(o.bits_stored));
  put(ds, DCM_HighBit, static_cast<Uint16>(o.bits_stored - 1));
  put(ds, DCM_PixelRepresentation, o.is_signed ? 1 : 0);
  if (o.slope != 1.0 || o.intercept != 0.0) {
    put(ds, DCM_RescaleIntercept, decimal_string(o.intercept), path);
    put(ds, DCM_RescaleSlope, decimal_string(o.slope), path);
  }
  if (o.window_width > 0) {
    put(ds, DCM_WindowCenter, decimal_string(o.window_center), path);
    put(ds, DCM_WindowWidth, decimal_string(o.window_width), path);
  }
}

// The pixel data as one JPEG 2000 fragment (after an empty basic offset table), OpenJPEG's lossless stream.
void put_j2k(DcmDataset& ds, const cv::Mat& stored, const DicomWriteOptions& o, const std::string& path) {
  std::vector<unsigned char> stream = detail::encode_j2k_lossless(
      reinterpret_cast<const uint16_t*>(stored.data), stored.cols, stored.rows, o.bits_stored, o.is_signed);
  if (stream.size() % 2) stream.push_back(0);  // items have even lengths
  auto sequence = std::make_unique<DcmPixelSequence>(DCM_PixelSequenceTag);
  sequence->insert(new DcmPixelItem(DCM_PixelItemTag));  // the basic offset table, empty for one frame
  auto* fragment = new DcmPixelItem(DCM_PixelItemTag);
  fragment->putUint8Array(stream.data(), static_cast<unsigned long>(stream.size()));
  sequence->insert(fragment);
  auto pixels = std::make_unique<DcmPixelData>(DCM_PixelData);
  pixels->putOriginalRepresentation(EXS_JPEG2000LosslessOnly, nullptr, sequence.release());
  if (ds.insert(pixels.release(), true).bad())
    RANZCR_FAIL("cannot write DICOM file ", path, ": DCMTK refused its JPEG 2000 pixel data");
}

}  // namespace

void write_dicom(const std::string& path, const cv::Mat& stored, const DicomWriteOptions& o) {
  RANZCR_CHECK(stored.type() == (o.is_signed ? CV_16SC1 : CV_16UC1) && stored.isContinuous(),
               "write_dicom: expected a continuous ", o.is_signed ? "CV_16SC1" : "CV_16UC1");
  register_encoders();
  DcmFileFormat file;
  DcmDataset& ds = *file.getDataset();
  put_header(ds, stored, o, path);
  E_TransferSyntax xfer = EXS_LittleEndianExplicit;
  OFCondition st = EC_Normal;
  if (o.syntax == DicomWriteOptions::Syntax::kJpeg2000Lossless) {
    put_j2k(ds, stored, o, path);
    xfer = EXS_JPEG2000LosslessOnly;
  } else {
    ds.putAndInsertUint16Array(DCM_PixelData, reinterpret_cast<const Uint16*>(stored.data),
                               static_cast<unsigned long>(stored.total()));
    const DcmRLERepresentationParameter rle;
    const DJ_RPLossless jpeg(/*prediction=*/1, /*point transform=*/0);
    const DJLSRepresentationParameter jpeg_ls(/*near=*/0, /*lossless=*/OFTrue);
    if (o.syntax == DicomWriteOptions::Syntax::kRle) {
      xfer = EXS_RLELossless;
      st = ds.chooseRepresentation(xfer, &rle);
    } else if (o.syntax == DicomWriteOptions::Syntax::kJpegLossless) {
      xfer = EXS_JPEGProcess14SV1;
      st = ds.chooseRepresentation(xfer, &jpeg);
    } else if (o.syntax == DicomWriteOptions::Syntax::kJpegLsLossless) {
      xfer = EXS_JPEGLSLossless;
      st = ds.chooseRepresentation(xfer, &jpeg_ls);
    }
  }
  RANZCR_CHECK(st.good() && ds.canWriteXfer(xfer), "cannot encode ", path, " as ",
               DcmXfer(xfer).getXferName(), ": ", st.text());
  st = file.saveFile(path.c_str(), xfer);
  RANZCR_CHECK(st.good(), "cannot write DICOM file ", path, ": ", st.text());
}

}  // namespace ranzcr
