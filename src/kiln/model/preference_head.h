// The LM head of a preference step (DPO and its variants: kernels/preference_terms.h), over a
// table lent for the head (sharded_table.h): whole, or split along its rows over a group as the
// vocabulary-parallel loss splits it (vocab_parallel_loss.h). A sequence's log-probability is a
// sum over all its completion's tokens, and a pair's loss a function of its two sequences', so
// the head runs two passes over chunks of rows, never holding the (N, V) logits:
//   pass 1, per chunk: the logits, each row's max and sum of exponentials (combined over the
//           group when split: two small all-reduces), and each row's loss -log p(target)
//   then:   each sequence's log-probability and completion length (sequence_logps), and from
//           them and the reference's, the pairs' loss and metrics and every row's weight
//           -scale d(loss)/d(logp) (preference_loss)
//   pass 2, per chunk: the logits again, their cross-entropy gradient times the row's weight,
//           dx and the table's gradient rows
// A table without a gradient (LoRA's frozen head) takes one pass: pass 1 also computes each row's
// dx before its weight, and the weights then scale the rows (scale_rows). A whole table with a
// gradient takes one pass too when every pair's rows fit one chunk of logits: each chunk then
// holds whole pairs, whose weights follow from its own rows before its gradient.
// Only rows with a target take part: they are compacted first (a prompt's rows cost nothing).
// Split, every rank's compacted rows x and targets are gathered once (and the references'
// sequence sums), every rank computes every row's statistics (as the split loss does) and so
// every sequence's log-probability: each rank adds its own pairs' sums and a reduce-scatter gives
// each rank its rows' dx. A batch holds B rows of T positions, row 2p a pair's chosen sequence and
// row 2p + 1 its rejected one (every rank the same B and T).
#pragma once

#include <cstdint>
#include <span>

#include "kiln/kernels/ops.h"
#include "kiln/model/sharded_table.h"

namespace kiln {

// A batch's rows with a target, compacted (Decoder::upload stages them with the batch): their
// indices in the batch and their targets, `count` of them; each array holds B * T entries, those
// past `count` padding (the batch's last row, which has no target).
struct TargetRows {
  const int32_t* index = nullptr;
  const int32_t* targets = nullptr;
  int count = 0;
  const int32_t* bounds = nullptr;  // (B, 2): each sequence's rows [begin, end) of the batch
  // (B) on the host: each sequence's rows with a target (they are consecutive in the compacted
  // order); empty when unknown, which costs a whole table with a gradient its one-pass chunks.
  std::span<const int> per_sequence;
};

// Each of B sequences a whole row of T: bounds (B, 2) = [b T, (b + 1) T) (Backend::sequence_logps).
void row_sequence_bounds(int B, int T, int32_t* bounds);

// Compacts a batch's B * T targets as TargetRows holds them: index and compact (B * T each) get
// the rows with a target, then padding (row B * T - 1, no target); per_sequence (B) each
// sequence's count. Returns the count.
int compact_target_rows(std::span<const int32_t> targets, int T, int32_t* index, int32_t* compact,
                        std::span<int> per_sequence);

// What a preference batch's head needs besides the table and the rows.
struct PreferenceHead {
  PreferenceTerms terms;
  // (B, 2): each of this rank's sequences' reference (logp, completion length) (device), as
  // head_sequence_logps writes them; null for SimPO (no reference).
  const double* ref_seq = nullptr;
  double* sums = nullptr;  // (kNumPreferenceSums) += this rank's pairs' loss and metric sums
};

// Both take their buffers from table.scratch, which a whole table must carry too (the decoder
// lends its own pool).
//
// The preference loss of B sequences of T rows x (B * T, C) against targets: h.sums += this
// rank's pairs', dx (B * T, C) = its input gradient (scaled by h.terms.scale), the table's
// gradient rows += theirs (when it has them). `rows`: the batch's rows with a target, the only
// ones the passes compute. With a group, a collective.
void preference_head_loss(const Backend& be, const ShardedTable& table, const PreferenceHead& h,
                          float* dx, const float* x, const int32_t* targets, const TargetRows& rows,
                          int B, int T, int C, int V);

// Forward only: seq (B, 2) += each sequence's (log-probability of its completion, completion
// length) under the table (whole or split, as above).
void head_sequence_logps(const Backend& be, const ShardedTable& table, double* seq, const float* x,
                         const int32_t* targets, const TargetRows& rows, int B, int T, int C,
                         int V);

}  // namespace kiln
