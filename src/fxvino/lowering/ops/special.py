"""Special functions: lgamma, digamma, polygamma (orders 0 and 1), erfc, erfcx, erfinv, ndtri,
the Bessel functions j0/j1/y0/y1 and spherical j0, and the modified Bessel functions
i0/i0e/i1/i1e and k0/k1 (plain and exponentially scaled).

OpenVINO has none of them, so each is built of elementwise arithmetic in f32 (16-bit inputs
widen to it, as torch's CPU kernels do): a recurrence or reflection into the range where a
series or a Chebyshev/rational approximation from the literature is accurate, every branch
computed and the right one selected. Branch inputs are clamped into their range so that an
unselected branch cannot overflow into the selected one, and special values (NaN, infinities,
poles) are selected explicitly at the end: the CPU plugin's Exp gives +inf for NaN and its
Greater/GreaterEqual are true on NaN, so only Less, Equal and IsNaN decide branches here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering import precise
from fxvino.lowering.registry import lowers
from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS

aten = torch.ops.aten

F32 = torch.float32
Operand = ov.Output | ov.Node | float

# ----------------------------------------------------------------------------- coefficients

# lgamma(2 + t) = t * P(t), |t| <= 1/2: its Taylor series, c1 = 1 - euler_gamma and
# c_k = (-1)^k (zeta(k) - 1) / k (Abramowitz & Stegun 6.1.33), highest degree first.
_LGAMMA_2 = (
    -2.0392157538013662e-06, 4.3748667899074882e-06, -9.4394882752683967e-06, 2.0507212775670691e-05,
    -4.4926236738133142e-05, 9.9457512781808531e-05, -0.00022315475845357939, 0.00050966952474304245,
    -0.001192753911703261, 0.0028905103307415234, -0.0073855510286739857, 0.020580808427784546,
    -0.067352301053198102, 0.3224670334241132, 0.42278433509846713,
)  # fmt: skip

# Stirling's series of lgamma past the leading terms, in 1/x^2: B_2k / (2k (2k-1)).
_STIRLING = (-1 / 1680, 1 / 1260, -1 / 360, 1 / 12)

# digamma's asymptotic series in 1/x^2: B_2k / (2k) (Cephes psi.c; A&S 6.3.18).
_DIGAMMA = (1 / 12, -691 / 32760, 1 / 132, -1 / 240, 1 / 252, -1 / 120, 1 / 12)

# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2010), single precision:
# erfinv(y) = y * P(w), w = -log(1 - y^2), one polynomial for w < 5 and one in sqrt(w) beyond.
_GILES_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941,
)  # fmt: skip
_GILES_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682,
)  # fmt: skip

# Cephes ndtri.c: rational approximations of the normal quantile, |p - 1/2| <= 3/8 in
# (p - 1/2)^2, then in 1/sqrt(-2 log p) for sqrt(-2 log p) below and above 8.
_NDTRI_P0 = (-59.9633501014107895267, 98.0010754185999661536, -56.6762857469070293439,
             13.9312609387279679503, -1.23916583867381258016)  # fmt: skip
_NDTRI_Q0 = (1.0, 1.95448858338141759834, 4.67627912898881538453, 86.3602421390890590575,
             -225.462687854119370527, 200.260212380060660359, -82.0372256168333339912,
             15.9056225126211695515, -1.18331621121330003142)  # fmt: skip
_NDTRI_P1 = (4.05544892305962419923, 31.5251094599893866154, 57.1628192246421288162,
             44.0805073893200834700, 14.6849561928858024014, 2.18663306850790267539,
             -0.140256079171354495875, -3.50424626827848203418e-2, -8.57456785154685413611e-4)  # fmt: skip
_NDTRI_Q1 = (1.0, 15.7799883256466749731, 45.3907635128879210584, 41.3172038254672030440,
             15.0425385692907503408, 2.50464946208309415979, -0.142182922854787788574,
             -3.80806407691578277194e-2, -9.33259480895457427372e-4)  # fmt: skip
_NDTRI_P2 = (3.23774891776946035970, 6.91522889068984211695, 3.93881025292474443415,
             1.33303460815807542389, 0.201485389549179081538, 1.23716634817820021358e-2,
             3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)  # fmt: skip
_NDTRI_Q2 = (1.0, 6.02427039364742014255, 3.67983563856160859403, 1.37702099489081330271,
             0.216236993594496635890, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
             2.89247864745380683936e-6, 6.79019408009981274425e-9)  # fmt: skip

# Cephes ndtrf.c erfcf: erfc(x) = exp(-x^2) / x * P(1/x^2) for 1 <= x < 2, R(1/x^2) from 2 on.
_ERFC_P = (2.326819970068386e-2, -1.387039388740657e-1, 3.687424674597105e-1, -5.824733027278666e-1,
           6.210004621745983e-1, -4.944515323274145e-1, 3.404879937665872e-1, -2.741127028184656e-1,
           5.638259427386472e-1)  # fmt: skip
_ERFC_R = (-1.047766399936249e1, 1.297719955372516e1, -7.495518717768503, 2.921019019210786,
           -1.015265279202700, 4.218463358204948e-1, -2.820767439740514e-1, 5.641895067754075e-1)  # fmt: skip

_EXP_MAX = 88.72283172607422

# Cephes i0.c / i1.c Chebyshev coefficients of exp(-x) I0(x), exp(-x) I1(x) / x on [0, 8] in
# x/2 - 2, and of sqrt(x) exp(-x) I0(x), sqrt(x) exp(-x) I1(x) on (8, inf) in 32/x - 2; terms
# below 1e-11 (under an f32 ulp of the sums) left out.
_I0E_A = (
    2.65982372468238665035e-9, -1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7,
    1.11738753912010371815e-6, -4.41673835845875056359e-6, 1.64484480707288970893e-5, -5.75419501008210370398e-5,
    1.88502885095841655729e-4, -5.76375574538582365885e-4, 1.63947561694133579842e-3, -4.32430999505057594430e-3,
    1.05464603945949983183e-2, -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2,
    1.71620901522208775349e-1, -3.04682672343198398683e-1, 6.76795274409476084995e-1,
)  # fmt: skip
_I0E_B = (
    -1.32158118404477131188e-11, -3.14991652796324136454e-11, 1.18891471078464383424e-11, 4.94060238822496958910e-10,
    3.39623202570838634515e-9, 2.26666899049817806459e-8, 2.04891858946906374183e-7, 2.89137052083475648297e-6,
    6.88975834691682398426e-5, 3.36911647825569408990e-3, 8.04490411014108831608e-1,
)  # fmt: skip
_I1E_A = (
    -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-9, 9.38153738649577178388e-9,
    -4.44505912879632808065e-8, 2.00329475355213526229e-7, -8.56872026469545474066e-7, 3.47025130813767847674e-6,
    -1.32731636560394358279e-5, 4.78156510755005422638e-5, -1.61760815825896745588e-4, 5.12285956168575772895e-4,
    -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2, 2.47264490306265168283e-2,
    -5.29459812080949914269e-2, 1.02643658689847095384e-1, -1.76416518357834055153e-1, 2.52587186443633654823e-1,
)  # fmt: skip
_I1E_B = (
    1.41258074366137813316e-11, 3.25260358301548823856e-11, -1.89749581235054123450e-11, -5.58974346219658380687e-10,
    -3.83538038596423702205e-9, -2.63146884688951950684e-8, -2.51223623787020892529e-7, -3.88256480887769039346e-6,
    -1.10588938762623716291e-4, -9.76109749136146840777e-3, 7.78576235018280120474e-1,
)  # fmt: skip

# Cephes j0.c / j1.c, as torch's Math.h evaluates them. Below 5, J0 = (z - r1^2)(z - r2^2) RP/RQ
# and J1 = x (z - r1^2)(z - r2^2) RP/RQ in z = x^2, the first two zeros r factored out;
# Y0 = YP/YQ + (2/pi) log(x) J0 and Y1 = x YP/YQ + (2/pi) (J1 log(x) - 1/x). From 5 on, the
# Hankel forms sqrt(2/(pi x)) (P cos(x - phase) - (5/x) Q sin(x - phase)) (Y: P sin + (5/x) Q cos)
# with P = PP/PQ and Q = QP/QQ in 25/x^2. torch's loops leave out the leading 1 of Cephes'
# monic denominators (RQ, YQ, QQ): up to 2.4e-6 of the amplitude from the true functions just
# above 5. Eager's value is the contract, so these are torch's polynomials, highest degree first.
_J0_ZEROS_SQ = (5.78318596294678452118, 30.4712623436620863991)
_J0_RP = (-4.79443220978201773821e9, 1.95617491946556577543e12, -2.49248344360967716204e14,
          9.70862251047306323952e15)  # fmt: skip
_J0_RQ = (4.99563147152651017219e2, 1.73785401676374683123e5, 4.84409658339962045305e7,
          1.11855537045356834862e10, 2.11277520115489217587e12, 3.10518229857422583814e14,
          3.18121955943204943306e16, 1.71086294081043136091e18)  # fmt: skip
_Y0_P = (1.55924367855235737965e4, -1.46639295903971606143e7, 5.43526477051876500413e9,
         -9.82136065717911466409e11, 8.75906394395366999549e13, -3.46628303384729719441e15,
         4.42733268572569800351e16, -1.84950800436986690637e16)  # fmt: skip
_Y0_Q = (1.04128353664259848412e3, 6.26107330137134956842e5, 2.68919633393814121987e8,
         8.64002487103935000337e10, 2.02979612750105546709e13, 3.17157752842975028269e15,
         2.50596256172653059228e17)  # fmt: skip
_J1_ZEROS_SQ = (14.6819706421238932572, 49.2184563216946036703)
_J1_RP = (-8.99971225705559398224e8, 4.52228297998194034323e11, -7.27494245221818276015e13,
          3.68295732863852883286e15)  # fmt: skip
_J1_RQ = (6.20836478118054335476e2, 2.56987256757748830383e5, 8.35146791431949253037e7,
          2.21511595479792499675e10, 4.74914122079991414898e12, 7.84369607876235854894e14,
          8.95222336184627338078e16, 5.32278620332680085395e18)  # fmt: skip
_Y1_P = (1.26320474790178026440e9, -6.47355876379160291031e11, 1.14509511541823727583e14,
         -8.12770255501325109621e15, 2.02439475713594898196e17, -7.78877196265950026825e17)  # fmt: skip
_Y1_Q = (5.94301592346128195359e2, 2.35564092943068577943e5, 7.34811944459721705660e7,
         1.87601316108706159478e10, 3.88231277496238566008e12, 6.20557727146953693363e14,
         6.87141087355300489866e16, 3.97270608116560655612e18)  # fmt: skip
# (PP, PQ, QP, QQ) of the Hankel forms, by order.
_JY_FAR = {
    0: (
        (7.96936729297347051624e-4, 8.28352392107440799803e-2, 1.23953371646414299388, 5.44725003058768775090,
         8.74716500199817011941, 5.30324038235394892183, 9.99999999999999997821e-1),
        (9.24408810558863637013e-4, 8.56288474354474431428e-2, 1.25352743901058953537, 5.47097740330417105182,
         8.76190883237069594232, 5.30605288235394617618, 1.00000000000000000218),
        (-1.13663838898469149931e-2, -1.28252718670509318512, -1.95539544257735972385e1, -9.32060152123768231369e1,
         -1.77681167980488050595e2, -1.47077505154951170175e2, -5.14105326766599330220e1, -6.05014350600728481186),
        (6.43178256118178023184e1, 8.56430025976980587198e2, 3.88240183605401609683e3, 7.24046774195652478189e3,
         5.93072701187316984827e3, 2.06209331660327847417e3, 2.42005740240291393179e2),
    ),
    1: (
        (7.62125616208173112003e-4, 7.31397056940917570436e-2, 1.12719608129684925192, 5.11207951146807644818,
         8.42404590141772420927, 5.21451598682361504063, 1.00000000000000000254),
        (5.71323128072548699714e-4, 6.88455908754495404082e-2, 1.10514232634061696926, 5.07386386128601488557,
         8.39985554327604159757, 5.20982848682361821619, 9.99999999999999997461e-1),
        (5.10862594750176621635e-2, 4.98213872951233449420, 7.58238284132545283818e1, 3.66779609360150777800e2,
         7.10856304998926107277e2, 5.97489612400613639965e2, 2.11688757100572135698e2, 2.52070205858023719784e1),
        (7.42373277035675149943e1, 1.05644886038262816351e3, 4.98641058337653607651e3, 9.56231892404756170795e3,
         7.99704160447350683650e3, 2.82619278517639096600e3, 3.36093607810698293419e2),
    ),
}  # fmt: skip

# Cephes k0.c / k1.c Chebyshev coefficients, by order: of K + (-1)^n log(x/2) In(x) (times x
# for K1) on (0, 2] in x^2 - 2, and of sqrt(x) exp(x) K on (2, inf) in 8/x - 2; terms below
# 1e-11 left out, as above.
_K_NEAR = {
    0: (1.03496952576338420167e-11, 1.90451637722020886025e-9, 2.53479107902614945675e-7,
        2.28621210311945178607e-5, 1.26461541144692592338e-3, 3.59799365153615016266e-2,
        3.44289899924628486886e-1, -5.35327393233902768720e-1),
    1: (-1.41148839263352776110e-10, -2.21338763073472585583e-8, -2.43340614156596823496e-6,
        -1.73028895751305206302e-4, -6.97572385963986435018e-3, -1.22611180822657148235e-1,
        -3.53155960776544875667e-1, 1.52530022733894777053),
}  # fmt: skip
_K_FAR = {
    0: (1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10,
        -1.69753450938905987466e-9, 8.57403401741422608519e-9, -4.66048989768794782956e-8,
        2.76681363944501510342e-7, -1.83175552271911948767e-6, 1.39498137188764993662e-5,
        -1.28495495816278026384e-4, 1.56988388573005337491e-3, -3.14481013119645005427e-2,
        2.44030308206595545468),
    1: (-2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10,
        2.01504975519703286596e-9, -1.03457624656780970260e-8, 5.74108412545004946722e-8,
        -3.50196060308781257119e-7, 2.40648494783721712015e-6, -1.93619797416608296024e-5,
        1.95215518471351631108e-4, -2.85781685962277938680e-3, 1.03923736576817238437e-1,
        2.72062619048444266945),
}  # fmt: skip


# ----------------------------------------------------------------------------- building blocks


def _v(a: Operand) -> ov.Output:
    if isinstance(a, ov.Output):
        return a
    if isinstance(a, ov.Node):
        return a.output(0)
    return h.const(a, F32)


def _add(a: Operand, b: Operand) -> ov.Output:
    return ops.add(_v(a), _v(b)).output(0)


def _sub(a: Operand, b: Operand) -> ov.Output:
    return ops.subtract(_v(a), _v(b)).output(0)


def _mul(a: Operand, b: Operand) -> ov.Output:
    return ops.multiply(_v(a), _v(b)).output(0)


def _div(a: Operand, b: Operand) -> ov.Output:
    return ops.divide(_v(a), _v(b)).output(0)


def _lt(a: Operand, b: Operand) -> ov.Output:
    return ops.less(_v(a), _v(b)).output(0)


def _eq(a: Operand, b: Operand) -> ov.Output:
    return ops.equal(_v(a), _v(b)).output(0)


def _where(cond: ov.Output, a: Operand, b: Operand) -> ov.Output:
    return ops.select(cond, _v(a), _v(b)).output(0)


def _unary(fn, a: Operand) -> ov.Output:
    return fn(_v(a)).output(0)


def _series(x: ov.Output, coeffs: Sequence[float], chebyshev: bool = False) -> ov.Output:
    """A polynomial in ``x`` (Horner, highest degree first) or, with ``chebyshev``, Cephes'
    chbevl: the Clenshaw sum of ``coeffs`` (highest order first) in Chebyshev polynomials of
    ``x / 2``, the last coefficient halved."""
    if not chebyshev:
        return precise.polynomial(x, coeffs)
    b0, b1, b2 = _v(coeffs[0]), _v(0.0), _v(0.0)
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = _add(_sub(_mul(x, b1), b2), c)
    return _mul(_sub(b0, b2), 0.5)


def _float_in(node: torch.fx.Node, x: ov.Output) -> ov.Output:
    """The operand in f32: torch computes 16-bit inputs in float, integers promote to float
    (and the CPU plugin computes float64 in f32 anyway)."""
    return h.cast(x, F32)


def _finish(node: torch.fx.Node, x: ov.Output, y: ov.Output) -> ov.Output:
    """``y`` in the node's dtype, NaN where the input is (whatever the branches made of it)."""
    return h.cast(_where(_unary(ops.is_nan, x), x, y), h.out_dtype(node))


def _frac_round(x: ov.Output) -> ov.Output:
    """``x - round(x)`` in [-1/2, 1/2], exact in f32: the argument sin(pi x) and tan(pi x)
    reduce to without the rounding of ``pi * x`` for large ``x``."""
    return _sub(x, ops.round(x, "half_to_even"))


def _no_16_bit(node: torch.fx.Node) -> str | None:
    """For the ops eager has no 16-bit kernel of: PyTorch runs them and raises its error."""
    if h.meta(node.args[0]).dtype in SIXTEEN_BIT_FLOATS:
        return "torch has no 16-bit kernel of it: PyTorch raises its error"
    return None


# ----------------------------------------------------------------------------- gamma family


def _lgamma_positive(z: ov.Output) -> ov.Output:
    """lgamma of ``z >= 0``: Stirling's series above 8; below, a product recurrence into
    [3/2, 5/2] and the Taylor series about 2, so that the zeros at 1 and 2 keep their relative
    accuracy (the shifts' logs carry no cancellation there)."""
    s = _unary(lambda a: ops.maximum(a, _v(8.0)), z)
    ls = _unary(ops.log, s)
    r = _div(1.0, s)
    stirling = _add(_sub(_mul(s, _sub(ls, 1.0)), _mul(ls, 0.5)), 0.5 * math.log(2 * math.pi))
    stirling = _add(stirling, _mul(r, _series(_mul(r, r), _STIRLING)))
    w = _unary(lambda a: ops.minimum(a, _v(8.0)), z)
    up, down = _v(1.0), _v(1.0)
    for _ in range(2):  # lgamma(w) = lgamma(w + 1) - log(w)
        step = _lt(w, 1.5)
        up, w = _where(step, _mul(up, w), up), _where(step, _add(w, 1.0), w)
    for _ in range(6):  # lgamma(w + 1) = lgamma(w) + log(w)
        step = _lt(2.5, w)
        w = _where(step, _sub(w, 1.0), w)
        down = _where(step, _mul(down, w), down)
    t = _sub(w, 2.0)
    small = _add(_mul(t, _series(t, _LGAMMA_2)), _sub(_unary(ops.log, down), _unary(ops.log, up)))
    return _where(_lt(8.0, z), stirling, small)


@lowers(aten.lgamma.default)
def lgamma(ctx, node, x):
    x = _float_in(node, x)
    negative = _lt(x, 0.0)
    # Reflection: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x).
    y = _lgamma_positive(_where(negative, _sub(1.0, x), x))
    r = _frac_round(x)
    sin = _unary(ops.abs, _unary(ops.sin, _mul(r, math.pi)))
    y = _where(negative, _sub(_sub(math.log(math.pi), _unary(ops.log, sin)), y), y)
    pole = ops.logical_or(ops.is_inf(x), ops.logical_and(negative, _eq(r, 0.0)))
    return _finish(node, x, _where(pole.output(0), math.inf, y))


def _polygamma_ok(node: torch.fx.Node) -> str | None:
    if node.args[0] not in (0, 1):
        return f"polygamma of order {node.args[0]} (only digamma and trigamma are lowered)"
    return None


def _digamma(x: ov.Output) -> ov.Output:
    """torch's algorithm (Cephes psi): the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10,
    the asymptotic series there, and reflection psi(x) = psi(1 - x) - pi / tan(pi x) below 0.
    At 0 it is -inf with the sign of -x; NaN at negative integers and -inf."""
    negative = _lt(x, 0.0)
    w = _where(negative, _sub(1.0, x), x)
    acc = _v(0.0)
    for _ in range(10):
        step = _lt(w, 10.0)
        acc = _where(step, _sub(acc, _div(1.0, w)), acc)
        w = _where(step, _add(w, 1.0), w)
    z = _div(1.0, _mul(w, w))
    y = _sub(_sub(_add(acc, _unary(ops.log, w)), _div(0.5, w)), _mul(z, _series(z, _DIGAMMA)))
    cot = _div(math.pi, _unary(ops.tan, _mul(_frac_round(x), math.pi)))
    y = _where(negative, _sub(y, cot), y)
    integer = ops.logical_and(negative, _eq(x, _unary(ops.floor, x))).output(0)
    y = _where(integer, math.nan, y)
    return _where(_eq(x, 0.0), _unary(ops.negative, _div(1.0, x)), y)


def _trigamma(x: ov.Output) -> ov.Output:
    """torch's algorithm: six steps of psi1(x) = psi1(x + 1) + 1/x^2, the asymptotic series, and
    below 1/2 the reflection psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x). The sine is torch's too,
    of the f32 product pi * x, unreduced: that loses digits for large |x| and makes poles
    finite, but eager's result is the contract (a reduced argument differed by up to 2x)."""
    reflect = _lt(x, 0.5)
    w = _where(reflect, _sub(1.0, x), x)
    acc = _v(0.0)
    for _ in range(6):
        acc = _add(acc, _div(1.0, _mul(w, w)))
        w = _add(w, 1.0)
    ixx = _div(1.0, _mul(w, w))
    tail = _add(_add(1.0, _div(0.5, w)), _mul(ixx, _series(ixx, (1 / 42, -1 / 30, 1 / 6))))
    acc = _add(acc, _div(tail, w))
    sin = _unary(ops.sin, _mul(x, math.pi))
    return _where(reflect, _sub(_div(math.pi**2, _mul(sin, sin)), acc), acc)


@lowers(aten.digamma.default)
def digamma(ctx, node, x):
    x = _float_in(node, x)
    return _finish(node, x, _digamma(x))


@lowers(aten.polygamma.default, validator=_polygamma_ok)
def polygamma(ctx, node, n, x):
    x = _float_in(node, x)
    return _finish(node, x, _digamma(x) if n == 0 else _trigamma(x))


# ----------------------------------------------------------------------------- error function family


def _exp_neg_square(a: ov.Output) -> ov.Output:
    """``exp(-a^2)`` without f32's rounding of ``a^2`` (Cephes expx2): ``a = m + f`` with ``m`` a
    multiple of 1/64, whose square is exact, and the small rest ``2 m f + f^2`` exponentiated
    apart. ``-a*a`` rounded first is off by ``a^2`` ulps of the result (5e-6 relative at 9)."""
    m = _mul(ops.floor(_add(_mul(a, 64.0), 0.5)), 1 / 64)
    f = _sub(a, m)
    rest = _add(_mul(_mul(m, 2.0), f), _mul(f, f))
    return _mul(_unary(ops.exp, _unary(ops.negative, _mul(m, m))), _unary(ops.exp, _unary(ops.negative, rest)))


def _erfc_tail(a: ov.Output) -> ov.Output:
    """``erfc(a) * exp(a^2)`` for ``a >= 1`` (the scaled tail; inputs below 1 are clamped)."""
    a = _unary(lambda v: ops.maximum(v, _v(1.0)), a)
    q = _div(1.0, a)
    y = _mul(q, q)
    return _mul(q, _where(_lt(a, 2.0), _series(y, _ERFC_P), _series(y, _ERFC_R)))


@lowers(aten.erfc.default)
def erfc(ctx, node, x):
    """``1 - erf`` below 1 (at least 0.157 there, so the subtraction loses nothing); Cephes' scaled
    tail above, where ``1 - erf`` kept nothing of a value below ~1e-7 (erfc(5) gave 0, torch
    1.54e-12); ``2 - erfc(-x)`` for negative ``x``."""
    x = _float_in(node, x)
    a = _unary(ops.abs, x)
    # erfc is below f32's smallest normal from ~9.2 on: clamping keeps infinities out of the split.
    far = _unary(lambda v: ops.minimum(v, _v(10.5)), a)
    tail = _mul(_exp_neg_square(far), _erfc_tail(far))
    positive = _where(_lt(a, 1.0), _sub(1.0, _unary(ops.erf, a)), tail)
    y = _where(_lt(x, 0.0), _sub(2.0, positive), positive)
    return _finish(node, x, y)


@lowers(aten.special_erfcx.default, validator=_no_16_bit)
def erfcx(ctx, node, x):
    """``exp(x^2) erfc(x)``: the scaled tail itself from 1 on (no exponential to overflow), and
    ``exp(x^2) (1 - erf(x))`` below; ``2 exp(x^2) - erfcx(-x)`` for negative ``x`` (inf from
    about -9.4, as torch's)."""
    x = _float_in(node, x)
    a = _unary(ops.abs, x)
    square = _mul(a, a)
    near = _mul(_unary(ops.exp, square), _sub(1.0, _unary(ops.erf, a)))
    positive = _where(_lt(a, 1.0), near, _erfc_tail(a))
    y = _where(_lt(x, 0.0), _sub(_mul(_unary(ops.exp, square), 2.0), positive), positive)
    return _finish(node, x, _where(_eq(x, math.inf), 0.0, y))


@lowers(aten.erfinv.default)
def erfinv(ctx, node, x):
    # Giles' approximation alone is within 2.3e-7 of the true value: no Newton step on
    # erf(y) = x, since the plugin's Erf is off by ~5e-7 relative at 0.5 and gives 0 below
    # ~5e-8 (a step made it worse, and doubled tiny inputs).
    x = _float_in(node, x)
    a = _unary(ops.abs, x)
    w = _unary(ops.negative, _unary(ops.log, _mul(_sub(1.0, a), _add(1.0, a))))
    central = _series(_sub(w, 2.5), _GILES_CENTRAL)
    tail = _series(_sub(_unary(ops.sqrt, w), 3.0), _GILES_TAIL)
    y = _mul(x, _where(_lt(w, 5.0), central, tail))
    y = _where(_eq(a, 1.0), _mul(x, math.inf), y)
    return _finish(node, x, _where(_lt(1.0, a), math.nan, y))


@lowers(aten.special_ndtri.default, validator=_no_16_bit)
def ndtri(ctx, node, p):
    p = _float_in(node, p)
    e2 = math.exp(-2)
    upper = _lt(1.0 - e2, p)
    q = _where(upper, _sub(1.0, p), p)  # the smaller tail, exactly
    c = _sub(q, 0.5)
    c2 = _mul(c, c)
    central = _mul(
        _add(c, _mul(c, _div(_mul(c2, _series(c2, _NDTRI_P0)), _series(c2, _NDTRI_Q0)))), math.sqrt(2 * math.pi)
    )
    t = _unary(ops.sqrt, _mul(-2.0, _unary(ops.log, q)))
    u = _div(1.0, t)
    near = _div(_mul(u, _series(u, _NDTRI_P1)), _series(u, _NDTRI_Q1))
    far = _div(_mul(u, _series(u, _NDTRI_P2)), _series(u, _NDTRI_Q2))
    tail = _sub(_sub(t, _div(_unary(ops.log, t), t)), _where(_lt(t, 8.0), near, far))
    tail = _where(upper, tail, _unary(ops.negative, tail))
    y = _where(_lt(e2, q), central, tail)  # Cephes' branches, boundaries included
    y = _where(_eq(p, 0.0), -math.inf, _where(_eq(p, 1.0), math.inf, y))
    outside = ops.logical_or(_lt(p, 0.0), _lt(1.0, p)).output(0)
    return _finish(node, p, _where(outside, math.nan, y))


# ----------------------------------------------------------------------------- Bessel functions


def _scaled_i_near(inner: ov.Output, a: ov.Output, small: Sequence[float], order: int) -> ov.Output:
    """exp(-|x|) I0/I1 on [0, 8] (``inner``: |x| clamped there, ``a``: |x|): Cephes' series."""
    near = _series(_sub(_mul(inner, 0.5), 2.0), small, chebyshev=True)
    return _mul(near, a) if order == 1 else near


def _bessel(x: ov.Output, small: Sequence[float], large: Sequence[float], order: int, scaled: bool) -> ov.Output:
    """I0/I1 (``order``), times exp(-|x|) with ``scaled``, as Cephes: a Chebyshev series on
    [0, 8] and one in 32/|x| - 2 beyond, divided by sqrt(|x|). Unscaled, exp(|x|) multiplies
    first, so the result overflows to inf where torch's does."""
    a = _unary(ops.abs, x)
    outer = _unary(lambda v: ops.maximum(v, _v(8.0)), a)
    near = _scaled_i_near(_unary(lambda v: ops.minimum(v, _v(8.0)), a), a, small, order)
    far_series = _series(_sub(_div(32.0, outer), 2.0), large, chebyshev=True)
    if scaled:
        far = _div(far_series, _unary(ops.sqrt, outer))
    else:
        # exp(|x|) as exp(|x|/2)^2, applied last: the plugin's Exp overflows from about 88.4,
        # below f32's limit (torch's exp(88.7) * series is finite).
        half = _unary(ops.exp, _mul(a, 0.5))
        near = _mul(_mul(half, near), half)
        far = _mul(_mul(half, _div(far_series, _unary(ops.sqrt, outer))), half)
        # torch's exp(|x|) is inf past this (the largest f32 whose exp is finite), and so is I.
        far = _where(_lt(_EXP_MAX, a), _mul(far, math.inf), far)
    y = _where(_lt(8.0, a), far, near)
    if order == 1:  # odd
        y = _where(_lt(x, 0.0), _unary(ops.negative, y), y)
    return y


def _j_near(x: ov.Output, order: int) -> ov.Output:
    """J0/J1 of ``|x| <= 5`` (clamped there by the caller), in torch's order of operations; J1
    from ``x`` itself, odd, so that -0 stays -0 as eager's."""
    z = _mul(x, x)
    if order == 1:
        r1, r2 = _J1_ZEROS_SQ
        ratio = _div(_series(z, _J1_RP), _series(z, _J1_RQ))
        return _mul(_mul(_mul(ratio, x), _sub(z, r1)), _sub(z, r2))
    r1, r2 = _J0_ZEROS_SQ
    y = _div(_mul(_mul(_sub(z, r1), _sub(z, r2)), _series(z, _J0_RP)), _series(z, _J0_RQ))
    return _where(_lt(_unary(ops.abs, x), 1e-5), _sub(1.0, _div(z, 4.0)), y)


def _jy_far(a: ov.Output, order: int, second_kind: bool) -> ov.Output:
    """J or Y (``second_kind``) of ``order`` for ``a >= 5`` (clamped there by the caller): the
    Hankel forms, the sine and cosine of the f32 ``a - phase`` as eager's (the plugin's Sin and
    Cos reduce large arguments exactly)."""
    pp, pq, qp, qq = _JY_FAR[order]
    five = _div(5.0, a)
    z = _div(25.0, _mul(a, a)) if order == 0 else _mul(five, five)
    p = _div(_series(z, pp), _series(z, pq))
    q = _mul(five, _div(_series(z, qp), _series(z, qq)))
    phase = _sub(a, (2 * order + 1) * math.pi / 4)
    sin, cos = _unary(ops.sin, phase), _unary(ops.cos, phase)
    y = _add(_mul(p, sin), _mul(q, cos)) if second_kind else _sub(_mul(p, cos), _mul(q, sin))
    return _div(_mul(y, math.sqrt(2 / math.pi)), _unary(ops.sqrt, a))


def _bessel_j(x: ov.Output, order: int) -> ov.Output:
    """J0 (even) or J1 (odd); NaN at the infinities, as eager's (its cosine of inf)."""
    a = _unary(ops.abs, x)
    near = _j_near(_unary(lambda v: ops.clamp(v, -5.0, 5.0), x), order)
    far = _jy_far(_unary(lambda v: ops.maximum(v, _v(5.0)), a), order, second_kind=False)
    if order == 1:
        far = _where(_lt(x, 0.0), _unary(ops.negative, far), far)
    y = _where(_lt(5.0, a), far, near)
    return _where(_unary(ops.is_inf, x), math.nan, y)


def _bessel_y(x: ov.Output, order: int) -> ov.Output:
    """Y0 or Y1: -inf at 0 (either sign), NaN below it and at +inf, as eager's."""
    w = _unary(lambda v: ops.minimum(v, _v(5.0)), x)
    z, log = _mul(w, w), _unary(ops.log, w)
    if order == 0:
        near = _add(_div(_series(z, _Y0_P), _series(z, _Y0_Q)), _mul(_mul(log, 2 / math.pi), _j_near(w, 0)))
    else:
        ratio = _div(_series(z, _Y1_P), _series(z, _Y1_Q))
        near = _add(_mul(w, ratio), _mul(_sub(_mul(_j_near(w, 1), log), _div(1.0, w)), 2 / math.pi))
    far = _jy_far(_unary(lambda v: ops.maximum(v, _v(5.0)), x), order, second_kind=True)
    y = _where(_lt(5.0, x), far, near)
    y = _where(_eq(x, 0.0), -math.inf, y)
    return _where(ops.logical_or(_lt(x, 0.0), _eq(x, math.inf)).output(0), math.nan, y)


def _bessel_k(x: ov.Output, order: int, scaled: bool) -> ov.Output:
    """K0 or K1, times exp(x) with ``scaled``, as Cephes: In(x) log(x/2) plus a Chebyshev
    series up to 2, a series in 8/x - 2 over sqrt(x) beyond. Unscaled, exp(-x) multiplies as
    exp(-x/2) twice, applied last: the plugin's Exp flushes results below f32's smallest normal
    (from ~87.3) to 0, where eager's exp(-x) times the series is subnormal. inf at 0, NaN below."""
    w = _unary(lambda v: ops.minimum(v, _v(2.0)), x)
    series = _series(_sub(_mul(w, w), 2.0), _K_NEAR[order], chebyshev=True)
    # In(w) for w <= 2 needs only the series on [0, 8]: the whole of _bessel is too big a
    # snippet for AVX2's 16 vector registers ("Can't allocate registers" at compile, k1).
    i_n = _mul(_scaled_i_near(w, w, _I0E_A if order == 0 else _I1E_A, order), _unary(ops.exp, w))
    log_i = _mul(_unary(ops.log, _mul(w, 0.5)), i_n)
    near = _sub(series, log_i) if order == 0 else _add(log_i, _div(series, w))
    v = _unary(lambda a: ops.maximum(a, _v(2.0)), x)
    far = _div(_series(_sub(_div(8.0, v), 2.0), _K_FAR[order], chebyshev=True), _unary(ops.sqrt, v))
    if scaled:
        near = _mul(near, _unary(ops.exp, w))
    else:
        half = _unary(ops.exp, _mul(v, -0.5))
        far = _mul(_mul(half, far), half)
    y = _where(_lt(2.0, x), far, near)
    y = _where(_eq(x, 0.0), math.inf, _where(_eq(x, math.inf), 0.0, y))
    return _where(_lt(x, 0.0), math.nan, y)


def _elementwise(compute):
    """A lowering of ``compute`` (f32 in, f32 out) in the node's dtype, NaN kept."""

    def lower(ctx, node, x):
        x = _float_in(node, x)
        return _finish(node, x, compute(x))

    return lower


def _spherical_j0(x: ov.Output) -> ov.Output:
    """sin(x) / x; below 1/2 its Taylor series in x^2 (torch's, to x^12); 0 at the infinities."""
    near = _series(_mul(x, x), [(-1) ** k / math.factorial(2 * k + 1) for k in range(6, -1, -1)])
    y = _where(_lt(_unary(ops.abs, x), 0.5), near, _div(_unary(ops.sin, x), x))
    return _where(_unary(ops.is_inf, x), 0.0, y)


# The Bessel family: (compute, whether eager has 16-bit kernels).
_BESSEL = {
    aten.i0.default: (lambda x: _bessel(x, _I0E_A, _I0E_B, 0, scaled=False), True),
    aten.special_i0e.default: (lambda x: _bessel(x, _I0E_A, _I0E_B, 0, scaled=True), True),
    aten.special_i1.default: (lambda x: _bessel(x, _I1E_A, _I1E_B, 1, scaled=False), True),
    aten.special_i1e.default: (lambda x: _bessel(x, _I1E_A, _I1E_B, 1, scaled=True), True),
    aten.special_modified_bessel_i0.default: (lambda x: _bessel(x, _I0E_A, _I0E_B, 0, scaled=False), False),
    aten.special_modified_bessel_i1.default: (lambda x: _bessel(x, _I1E_A, _I1E_B, 1, scaled=False), False),
    aten.special_bessel_j0.default: (lambda x: _bessel_j(x, 0), False),
    aten.special_bessel_j1.default: (lambda x: _bessel_j(x, 1), False),
    aten.special_bessel_y0.default: (lambda x: _bessel_y(x, 0), False),
    aten.special_bessel_y1.default: (lambda x: _bessel_y(x, 1), False),
    aten.special_modified_bessel_k0.default: (lambda x: _bessel_k(x, 0, scaled=False), False),
    aten.special_modified_bessel_k1.default: (lambda x: _bessel_k(x, 1, scaled=False), False),
    aten.special_scaled_modified_bessel_k0.default: (lambda x: _bessel_k(x, 0, scaled=True), False),
    aten.special_scaled_modified_bessel_k1.default: (lambda x: _bessel_k(x, 1, scaled=True), False),
    aten.special_spherical_bessel_j0.default: (_spherical_j0, False),
}
for _op, (_compute, _sixteen_bit) in _BESSEL.items():
    lowers(_op, validator=None if _sixteen_bit else _no_16_bit)(_elementwise(_compute))
