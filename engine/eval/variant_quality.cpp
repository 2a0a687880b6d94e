// `bitsplit eval --base`: how close a BitDelta variant on the shared base comes to its
// fine-tuned model, in every tier, against converting the fine-tuned model directly.
#include <memory>

#include "bitsplit/quality.h"
#include "bitsplit/vram_plan.h"

namespace bitsplit {
namespace {

// Bytes of the D + R planes of every projection.
uint64_t plane_bytes(const Model& m) {
  uint64_t b = 0;
  for (const std::string& name : placement_order(m.config().n_layers, projection_kinds(m.config())))
    if (const SplitProjection* p = m.split(name)) b += p->plane_bytes();
  return b;
}

}  // namespace

Result<VariantEvalReport> evaluate_variant_quality(const Model& base, const Model& finetuned,
                                                   const std::vector<int32_t>& tokens, const VariantEvalOptions& o,
                                                   const std::function<void(int64_t, int64_t)>& on_progress) {
  if (o.group != 32 && o.group != 64 && o.group != 128) return Status::error("the group size must be 32, 64 or 128");
  VariantEvalReport report;
  BITSPLIT_ASSIGN_OR_RETURN(DeltaParts row, compute_delta(base, finetuned, quant::DeltaAlpha::kRow));
  BITSPLIT_ASSIGN_OR_RETURN(DeltaParts matrix, compute_delta(base, finetuned, quant::DeltaAlpha::kMatrix));

  // Both sides as `bitsplit convert` makes them (the embedding keeps f32 here: it is not a
  // split projection and the comparison is about the projections).
  auto cpu_context = std::make_shared<cpu::CpuContext>();
  const WeightTransform same = [](const std::string&, const std::vector<float>& w, int64_t, int64_t) { return w; };
  std::map<int, Model> base_split, ft_split;
  for (int bits : {8, 6}) {
    quant::SplitParams p;
    p.group = o.group;
    p.residual_bits = bits;
    BITSPLIT_ASSIGN_OR_RETURN(Model b, base.with_split_planes(p, nullptr, same, cpu_context));
    BITSPLIT_ASSIGN_OR_RETURN(Model f, finetuned.with_split_planes(p, nullptr, same, cpu_context));
    base_split.emplace(bits, std::move(b));
    ft_split.emplace(bits, std::move(f));
  }
  report.base_split_bytes_r8 = plane_bytes(base_split.at(8));
  report.base_split_bytes_r6 = plane_bytes(base_split.at(6));

  std::vector<std::shared_ptr<const Variant>> keep;
  auto variant = [&](const DeltaParts& parts, const std::string& name) -> Result<const Variant*> {
    BITSPLIT_ASSIGN_OR_RETURN(auto v, Variant::make(base, name, parts.signs, parts.full));
    keep.push_back(v);
    return v.get();
  };
  BITSPLIT_ASSIGN_OR_RETURN(const Variant* v_row, variant(row, "row"));
  BITSPLIT_ASSIGN_OR_RETURN(const Variant* v_mat, variant(matrix, "matrix"));
  report.delta_bytes_row = v_row->bytes();
  report.delta_bytes_matrix = v_mat->bytes();
  std::vector<ScoredModel> c = {
      {"FT D+R8", &ft_split.at(8), Pass::kTarget},
      {"FT D+R6", &ft_split.at(6), Pass::kTarget},
      {"base D+R8 (no delta)", &base_split.at(8), Pass::kTarget},
      {"f32+delta/row", &base, Pass::kDefault, v_row},
      {"f32+delta/matrix", &base, Pass::kDefault, v_mat},
      {"D+R8+delta/row", &base_split.at(8), Pass::kTarget, v_row},
      {"D+R6+delta/row", &base_split.at(6), Pass::kTarget, v_row},
      {"D+R8+delta/matrix", &base_split.at(8), Pass::kTarget, v_mat},
      {"D+R6+delta/matrix", &base_split.at(6), Pass::kTarget, v_mat},
      {"FT draft", &ft_split.at(8), Pass::kDraft},
      {"base draft (no delta)", &base_split.at(8), Pass::kDraft},
      {"draft+delta/row", &base_split.at(8), Pass::kDraft, v_row},
  };
  if (o.distill_tokens) {
    DeltaParts row_d = row, matrix_d = matrix;
    BITSPLIT_ASSIGN_OR_RETURN(report.distill_row,
                              distill_delta_scales(base, finetuned, *o.distill_tokens, o.distill_ctx, o.bos, row_d, nullptr));
    BITSPLIT_ASSIGN_OR_RETURN(report.distill_matrix, distill_delta_scales(base, finetuned, *o.distill_tokens, o.distill_ctx,
                                                                          o.bos, matrix_d, nullptr));
    BITSPLIT_ASSIGN_OR_RETURN(const Variant* d_row, variant(row_d, "row, distilled"));
    BITSPLIT_ASSIGN_OR_RETURN(const Variant* d_mat, variant(matrix_d, "matrix, distilled"));
    c.push_back({"f32+delta/row/distilled", &base, Pass::kDefault, d_row});
    c.push_back({"D+R8+delta/row/distilled", &base_split.at(8), Pass::kTarget, d_row});
    c.push_back({"D+R6+delta/row/distilled", &base_split.at(6), Pass::kTarget, d_row});
    c.push_back({"D+R8+delta/matrix/distilled", &base_split.at(8), Pass::kTarget, d_mat});
    c.push_back({"draft+delta/row/distilled", &base_split.at(8), Pass::kDraft, d_row});
    if (o.kl_sweeps > 0) {  // the layer-wise fit, then the end-to-end KL refinement on top
      DeltaParts kl_d = row_d;
      BITSPLIT_ASSIGN_OR_RETURN(report.distill_kl, distill_delta_kl(base, finetuned, *o.distill_tokens, o.distill_ctx,
                                                                    o.bos, kl_d, o.kl_sweeps, o.kl_max_tokens, nullptr));
      BITSPLIT_ASSIGN_OR_RETURN(const Variant* d_kl, variant(kl_d, "row, KL-distilled"));
      c.push_back({"f32+delta/row/kl-distilled", &base, Pass::kDefault, d_kl});
      c.push_back({"D+R8+delta/row/kl-distilled", &base_split.at(8), Pass::kTarget, d_kl});
      c.push_back({"D+R6+delta/row/kl-distilled", &base_split.at(6), Pass::kTarget, d_kl});
      c.push_back({"draft+delta/row/kl-distilled", &base_split.at(8), Pass::kDraft, d_kl});
    }
  }
  BITSPLIT_ASSIGN_OR_RETURN(report.scores, score_against(finetuned, c, tokens, o.ctx, o.bos, o.max_tokens, on_progress));
  return report;
}

}  // namespace bitsplit
