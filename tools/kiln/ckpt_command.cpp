// `kiln ckpt show|diff|convert`: look into checkpoints and bring weights from
// PyTorch or MindSpore (or another Kiln model) over to a recipe's model.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "kiln/migrate.h"
#include "kiln/recipe.h"

namespace kiln::cli {
namespace {

std::vector<io::TensorInfo> target_of(const std::string& recipe_path, const std::string& other) {
  if (!other.empty()) return io::infos_of(io::load_tensor_file(other));
  KILN_CHECK(!recipe_path.empty(), "give the model to compare with: --recipe R.yaml or --against OTHER_FILE");
  return io::infos_of(*recipe::build_model(recipe::parse_recipe_file(recipe_path)));
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  static std::string file, recipe_path, against, map_path, out;
  static bool allow_unmatched = false;
  auto* ckpt = app.add_subcommand("ckpt", "Inspect checkpoints and convert PyTorch and MindSpore weights");
  ckpt->require_subcommand(1);

  auto* show = ckpt->add_subcommand("show", "Names, shapes, dtypes and parameter count of a checkpoint");
  show->add_option("file", file, "safetensors, PyTorch .pt/.pth or MindSpore .ckpt file")->required();
  show->callback([] {
    io::NamedTensors tensors = io::load_tensor_file(file);
    int64_t count = 0;
    size_t w = 4;
    for (auto& [n, t] : tensors) w = std::max(w, n.size());
    for (auto& [n, t] : tensors) {
      std::printf("%-*s  %-9s %s\n", static_cast<int>(w), n.c_str(), dtype_name(t.dtype()), shape_str(t.shape()).c_str());
      count += t.numel();
    }
    std::printf("%zu tensors, %lld values\n", tensors.size(), static_cast<long long>(count));
  });

  auto* diff = ckpt->add_subcommand("diff", "Match a checkpoint's names to a recipe's model (or another checkpoint)");
  diff->add_option("file", file, "safetensors, PyTorch .pt/.pth or MindSpore .ckpt file")->required();
  diff->add_option("--recipe", recipe_path, "Recipe whose model the names should fit");
  diff->add_option("--against", against, "Another checkpoint whose names the file should fit");
  diff->add_option("--map", map_path, "Rename rules (YAML) to apply first");
  diff->callback([] {
    auto source = io::infos_of(io::load_tensor_file(file));
    auto target = target_of(recipe_path, against);
    auto m = io::match_names(source, target, map_path.empty() ? io::RenameRules{} : io::load_rename_rules(map_path));
    std::printf("%s\n", io::format_matches(m, source, target).c_str());
  });

  auto* convert = ckpt->add_subcommand("convert", "Rename (and transpose) a checkpoint's tensors to fit a recipe's model");
  convert->add_option("file", file, "safetensors, PyTorch .pt/.pth or MindSpore .ckpt file")->required();
  convert->add_option("--recipe", recipe_path, "Recipe whose model the result is for")->required();
  convert->add_option("--map", map_path, "Rename rules (YAML): rename, transpose, ignore");
  convert->add_option("--out", out, "Output file: safetensors, or MindSpore's format for a .ckpt name")->required();
  convert->add_flag("--allow-unmatched", allow_unmatched, "Write what matched even when entries are left unmatched");
  convert->callback([] {
    io::NamedTensors tensors = io::load_tensor_file(file);
    auto source = io::infos_of(tensors);
    auto target = target_of(recipe_path, "");
    auto m = io::match_names(source, target, map_path.empty() ? io::RenameRules{} : io::load_rename_rules(map_path));
    std::printf("%s\n", io::format_matches(m, source, target).c_str());
    KILN_CHECK(m.complete() || allow_unmatched, "not converted: ", m.unmatched_target.size(),
               " model entries and ", m.unmatched_source.size(),
               " file entries are unmatched; add rename rules (--map) or pass --allow-unmatched");
    const bool to_mindspore = out.size() >= 5 && out.compare(out.size() - 5, 5, ".ckpt") == 0;
    if (to_mindspore) io::save_mindspore_checkpoint(out, io::apply_matches(m, tensors, target), {{"converted_from", file}});
    else io::save_safetensors(out, io::apply_matches(m, tensors, target), {{"converted_from", file}});
    std::printf("wrote %s (%zu tensors)\n", out.c_str(), m.matched.size());
  });
}

}  // namespace kiln::cli
