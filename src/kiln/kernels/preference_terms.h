// Preference losses (DPO and its variants, as TRL defines them), one definition for every
// backend: the CPU's loop and the CUDA kernel (host and device code) call pair_terms, so a pair's
// loss, rewards and gradient are the same formulas wherever they run (Backend::preference_loss,
// ops.h). tools/dpo_reference.py is the independent float64 reference they are held to.
//
// A pair: chosen and rejected sequences of the same prompt; pc, pr the policy's log-probabilities
// of their completions (sums over the completion's tokens), rc, rr the reference's, nc, nr the
// completions' lengths; beta > 0; ls the label smoothing.
//   sigmoid: z = (pc - pr) - (rc - rr);        loss = -(1 - ls) log s(beta z) - ls log s(-beta z)
//   ipo:     z = (pc/nc - pr/nr) - (rc/nc - rr/nr);  loss = (z - 1 / (2 beta))^2
//   hinge:   z as sigmoid's;                   loss = max(0, 1 - beta z)
//   simpo:   z = pc/nc - pr/nr - gamma / beta (no reference); loss as sigmoid's
// Rewards (TRL's metrics): beta (pc - rc) and beta (pr - rr); SimPO's beta pc/nc and beta pr/nr.
#pragma once

#include <cmath>

#include "kiln/kernels/cuda/host_device.h"

namespace kiln {

enum class PreferenceLossType { kSigmoid, kIpo, kHinge, kSimpo };

// A preference loss's settings, and the factor of every pair's gradient (1 / the step's pairs:
// the loss is the mean over the step's pairs on every rank).
struct PreferenceTerms {
  PreferenceLossType type = PreferenceLossType::kSigmoid;
  double beta = 0.1;
  double label_smoothing = 0;
  double simpo_gamma = 0.5;
  double scale = 1;
};

// The device sums a preference step adds into (Backend::preference_loss), over its valid pairs:
// the loss, the six metrics' numerators (TRL's names in the comments) and the pairs counted.
enum PreferenceSum {
  kPrefLoss,            // loss
  kPrefRewardChosen,    // rewards/chosen
  kPrefRewardRejected,  // rewards/rejected
  kPrefAccuracy,        // rewards/accuracies: pairs whose chosen reward is the larger
  kPrefMargin,          // rewards/margins
  kPrefLogpChosen,      // logps/chosen
  kPrefLogpRejected,    // logps/rejected
  kPrefPairs,           // the pairs counted (both completions non-empty)
  kNumPreferenceSums
};

// One pair's loss, its derivatives by pc and pr, and its rewards.
struct PairTerms {
  double loss = 0, d_chosen = 0, d_rejected = 0, reward_chosen = 0, reward_rejected = 0;
};

// log(sigmoid(x)), without overflow for either sign (log(1 + e) rather than log1p: absolute
// error below 2e-16 either way, and CUDA's log1p in double spills registers).
KILN_HOST_DEVICE inline double log_sigmoid(double x) {
  return x >= 0 ? -log(1 + exp(-x)) : x - log(1 + exp(x));
}
KILN_HOST_DEVICE inline double sigmoid(double x) {
  return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

KILN_HOST_DEVICE inline PairTerms pair_terms(const PreferenceTerms& s, double pc, double pr,
                                             double rc, double rr, double nc, double nr) {
  const double beta = s.beta, ls = s.label_smoothing;
  PairTerms t;
  // z and its derivatives by pc and pr; dl_dz: the loss's derivative by z.
  double z = 0, zc = 1, zr = -1, dl_dz = 0;
  if (s.type == PreferenceLossType::kIpo) {
    z = (pc / nc - pr / nr) - (rc / nc - rr / nr);
    zc = 1 / nc;
    zr = -1 / nr;
    const double d = z - 1 / (2 * beta);
    t.loss = d * d;
    dl_dz = 2 * d;
  } else if (s.type == PreferenceLossType::kHinge) {
    z = (pc - pr) - (rc - rr);
    const double h = 1 - beta * z;
    t.loss = h > 0 ? h : 0;
    dl_dz = h > 0 ? -beta : 0;
  } else {
    if (s.type == PreferenceLossType::kSimpo) {
      z = pc / nc - pr / nr - s.simpo_gamma / beta;
      zc = 1 / nc;
      zr = -1 / nr;
    } else {
      z = (pc - pr) - (rc - rr);
    }
    t.loss = -(1 - ls) * log_sigmoid(beta * z) - ls * log_sigmoid(-beta * z);
    dl_dz = -(1 - ls) * beta * sigmoid(-beta * z) + ls * beta * sigmoid(beta * z);
  }
  t.d_chosen = dl_dz * zc;
  t.d_rejected = dl_dz * zr;
  if (s.type == PreferenceLossType::kSimpo) {
    t.reward_chosen = beta * pc / nc;
    t.reward_rejected = beta * pr / nr;
  } else {
    t.reward_chosen = beta * (pc - rc);
    t.reward_rejected = beta * (pr - rr);
  }
  return t;
}

}  // namespace kiln
