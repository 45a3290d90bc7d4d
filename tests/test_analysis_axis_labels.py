"""Every panel's axes say what it plots: a text panel set beside a video panel in one row of Fig 7 read the row's
video label (½‖x − Φ_l‖², pixels) for its cross-entropy."""

from __future__ import annotations

from helpers.analysis import write_run


def test_a_text_panel_beside_a_video_panel_names_its_own_loss(tmp_path, monkeypatch):
    from analysis import figure_kit
    from analysis.collect import collect_runs
    from analysis.figure_kit import LOSS_LABEL
    from analysis.figures_layers import layerwise_loss

    for arm in (True, False):
        write_run(tmp_path, f"video_{arm}", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=arm,
                  test=14.0, selection=14.0)
        write_run(tmp_path, f"text_{arm}", model="ut_text", dataset="imdb", L=3, gamma=0.2, constrained=arm,
                  test=[0.9, 0.8, 0.7, 0.6], selection=0.8)
    drawn = []
    save = figure_kit._save
    monkeypatch.setattr(figure_kit, "_save", lambda figure, *args: drawn.append(figure) or save(figure, *args))
    result = layerwise_loss(collect_runs(tmp_path), tmp_path / "figures")
    assert result.written, result.skipped
    labels = [(ax.get_title(), ax.get_ylabel()) for ax in drawn[0].axes if ax.get_visible()]
    assert [label for _, label in labels] == [LOSS_LABEL["video"], LOSS_LABEL["text"]], labels
    assert "imdb" in labels[1][0]


def test_a_dollar_in_a_data_root_is_drawn_as_written_in_a_panel_title(tmp_path, monkeypatch):
    """A data root ``ped2 $5-$9.npz`` in a panel's title was read by matplotlib as mathtext (``5-`` set as math)."""
    from analysis import figure_kit
    from analysis.collect import collect_runs
    from analysis.figures_layers import layerwise_loss

    for root in ("/d/ped2 $5-$9.npz", "/d/ped2.npz"):  # two roots: the panel titles name them
        for arm in (True, False):
            write_run(tmp_path, f"{arm}{len(root)}", model="dust", dataset="ucsd_ped2", L=3, gamma=0.09,
                      constrained=arm, test=14.0, selection=14.0, data={"root": root})
    drawn = []
    save = figure_kit._save
    monkeypatch.setattr(figure_kit, "_save", lambda figure, *args: drawn.append(figure) or save(figure, *args))
    assert layerwise_loss(collect_runs(tmp_path), tmp_path / "figures").written
    titles = [ax.title._preprocess_math(ax.get_title()) for ax in drawn[0].axes if ax.get_visible()]
    # math for the γ name, where mathtext draws each escaped \$ as a $
    assert (r"dust · ucsd_ped2 (root=ped2 \$5-\$9.npz) · L=3 · $\gamma_\mathrm{train}$=0.09", True) in titles, titles
