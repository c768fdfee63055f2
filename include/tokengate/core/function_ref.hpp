#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace tokengate::core {

template <class Signature>
class FunctionRef;

/// A callable seen, not owned: what a hook needs when its caller outlives the call (SPEC §19:
/// no std::function, which copies a capturing lambda to the heap, per request). It binds only
/// to a named callable, never to a temporary, which would be gone before it is called.
template <class R, class... Args>
class FunctionRef<R(Args...)> {
public:
    FunctionRef() noexcept = default;
    FunctionRef(std::nullptr_t) noexcept {}  // NOLINT: as a null std::function
    template <class F>
    requires(std::is_object_v<F> && !std::is_same_v<std::remove_cv_t<F>, FunctionRef> &&
             std::is_invocable_r_v<R, F&, Args...>) FunctionRef(F& callable)
    noexcept  // NOLINT: implicit, like std::function's
        : object_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
          call_([](void* object, Args... args) -> R {
              return std::invoke(*static_cast<F*>(object), std::forward<Args>(args)...);
          }) {}

    explicit operator bool() const noexcept { return call_ != nullptr; }
    R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
    void* object_ = nullptr;
    R (*call_)(void*, Args...) = nullptr;
};

}  // namespace tokengate::core
