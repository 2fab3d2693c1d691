/* cli_export.c — `lstmd export onnx`: a checkpoint's model as an ONNX file
 * (worker/io/onnx_export.h has the graph; README.md "Export to ONNX" documents it). */
#include <stdio.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/io/onnx_export.h"
#include "worker/io/qcheckpoint.h"
#include "worker/io/durable.h"
#include "cli.h"

#define EXPORT_USAGE \
  "usage: lstmd export onnx --checkpoint CKPT --out MODEL.onnx [--opset N] [--int8]\n"

int lstmd_cmd_export(int argc, char **argv) {
  lstmd_durable_remove_temps_on_signal(); /* a Ctrl-C leaves no partial file beside --out */
  if (argc < 3 || strcmp(argv[2], "onnx") != 0) {
    int help = argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"));
    if (!help) lstmd_errorf("export: the format must be 'onnx' (the only one)");
    fputs(EXPORT_USAGE, help ? stdout : stderr);
    return help ? 0 : 2;
  }
  const char *ckpt = NULL, *out = NULL, *opset_text = NULL;
  int help = 0, int8 = 0;
  struct lstmd_opt opts[] = {{"checkpoint", &ckpt}, {"out", &out}, {"opset", &opset_text},
                             {"int8", NULL, &int8}, {"help", NULL, &help}};
  int rc = lstmd_parse_opts("export onnx", argc, argv, 3, opts, 5);
  if (rc || help) {
    fprintf(help ? stdout : stderr,
            EXPORT_USAGE
            "Writes the model as one ONNX graph (LSTM operator per layer) with inputs\n"
            "tokens|inputs, h0, c0 and outputs logits|predictions, hn, cn. Opset %d..%d, default %d.\n"
            "--int8: the weights as `lstmd quantize` stores them, for onnxruntime's\n"
            "DynamicQuantizeLSTM and DynamicQuantizeMatMul (com.microsoft).\n",
            LSTMD_ONNX_OPSET_MIN, LSTMD_ONNX_OPSET_MAX, LSTMD_ONNX_OPSET_DEFAULT);
    return rc;
  }
  if (!ckpt || !out) {
    lstmd_errorf("export onnx: --%s is required", ckpt ? "out" : "checkpoint");
    return 2;
  }
  if ((rc = lstmd_opt_out_not_stdout("export onnx", out, "an ONNX model (binary protobuf)")) ||
      (rc = lstmd_opt_not_same_file("export onnx", "checkpoint", ckpt, "out", out)) ||
      (rc = lstmd_opt_out_replaces_no_input("export onnx", out)))
    return rc;
  long opset = LSTMD_ONNX_OPSET_DEFAULT;
  if (opset_text && (rc = lstmd_opt_long("export onnx", "opset", opset_text, LSTMD_ONNX_OPSET_MIN,
                                         LSTMD_ONNX_OPSET_MAX, &opset)))
    return rc;
  if (lstmd_qcheckpoint_is_int8(ckpt)) {
    lstmd_errorf("%s: an int8 model file; export takes the fp32 checkpoint it was made from "
                 "(with --int8, its weights are quantised as lstmd quantize does)", ckpt);
    return 2;
  }
  struct lstmd_model *m;
  struct lstmd_data_meta meta;
  if ((rc = lstmd_checkpoint_load_model(ckpt, &m, &meta))) return lstmd_exit_code(rc);
  if ((rc = lstmd_refuse_classifier("export onnx", ckpt, m))) {
    lstmd_model_destroy(m);
    return rc;
  }
  rc = lstmd_onnx_export(m, &meta, ckpt, (int)opset, int8, out);
  lstmd_model_destroy(m);
  if (!rc)
    fprintf(stderr, "wrote %s (opset %ld%s) from %s\n", out, opset, int8 ? ", int8" : "", ckpt);
  return lstmd_exit_code(rc);
}
